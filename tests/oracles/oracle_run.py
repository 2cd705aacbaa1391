"""What the structured-output oracles (structured_outputs_check.py, schema_fuzz.py) share: the two
models they run, made once under their work folder, one `tpllama run` over a batch of requests
read back by id, and checks of the string formats of our own (beside jsonschema's)."""
import json
import os
import re
import subprocess

# RFC 3339 full-date, full-time and date-time; RFC 4122's text form; an @ for email.
DATE = r"(\d{4})-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])"
TIME = r"([01]\d|2[0-3]):[0-5]\d:([0-5]\d|60)(\.\d+)?([Zz]|[+-]([01]\d|2[0-3]):[0-5]\d)"
FORMATS = {
    "date": DATE,
    "time": TIME,
    "date-time": DATE + "[Tt ]" + TIME,
    "uuid": r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}",
    "email": r"[^@\s]+@[^@\s]+",
}


def format_ok(name, value):
    """Whether value is of the format by our own check (a full-date is a day of its month: RFC
    3339 5.7)."""
    m = re.fullmatch(FORMATS[name], value, re.ASCII)
    if not m:
        return False
    if name in ("date", "date-time"):
        y, mo, d = int(m.group(1)), int(m.group(2)), int(m.group(3))
        leap = y % 4 == 0 and (y % 100 != 0 or y % 400 == 0)
        days = [31, 29 if leap else 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31][mo - 1]
        return d <= days
    return True


def models(tpllama, models_dir, llama3_tokenizer, work, llama3=True):
    """The paths of stories260K (converted from the shipped files) and, where asked, of a random
    llama3-tiny model with the Llama 3 vocabulary; each made unless it is there."""
    stories = os.path.join(work, "stories260K")
    random3 = os.path.join(work, "llama3_random")
    converts = [[tpllama, "convert", "--from", "llama2c", "--checkpoint",
                 os.path.join(models_dir, "stories260K/stories260K.bin"), "--tokenizer",
                 os.path.join(models_dir, "stories260K/tok512.model"), "--out", stories]]
    if llama3:
        converts.append([tpllama, "convert", "--from", "random", "--shape", "llama3-tiny",
                         "--seed", "7", "--tokenizer", llama3_tokenizer, "--out", random3])
    for cmd in converts:
        if not os.path.exists(cmd[-1]):
            subprocess.run(cmd, check=True, capture_output=True)
    return stories, random3


def run_batch(tpllama, model, requests, work, tag, ok_codes=(0,)):
    """Runs the requests (dicts with an "id") in one batch; returns (records by id, the stats'
    structured_outputs), or (None, None) when tpllama exits otherwise than ok_codes (its output
    printed)."""
    inp = os.path.join(work, f"{tag}_in.jsonl")
    outp = os.path.join(work, f"{tag}_out.jsonl")
    stats = os.path.join(work, f"{tag}_stats.json")
    with open(inp, "w") as f:
        for r in requests:
            f.write(json.dumps(r) + "\n")
    cmd = [tpllama, "run", "--model", model, "--input", inp, "--output", outp, "--overwrite",
           "--stats", stats, "--max-seqs", "32"]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode not in ok_codes or not os.path.exists(outp):
        print(f"{tag}: tpllama exited {proc.returncode}")
        print(proc.stdout[-4000:] + proc.stderr[-4000:])
        return None, None
    records = {}
    with open(outp) as f:
        for line in f:
            rec = json.loads(line)
            records[rec["id"]] = rec
    with open(stats) as f:
        so = json.load(f).get("structured_outputs") or {}
    return records, so
