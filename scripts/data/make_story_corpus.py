#!/usr/bin/env python3
"""Writes a corpus of short children's stories in plain English, for perplexity comparisons of
weight formats on stories260K (whose training data is text of this kind).

The stories are built from sentence patterns and word lists written for this project, drawn with a
fixed seed, so the same command always writes the same text:

    scripts/data/make_story_corpus.py --stories 150 > /tmp/stories.txt

150 stories are about 27 000 stories260K tokens (about 180 a story).
"""
import argparse
import random

NAMES = ["Lily", "Tom", "Mia", "Ben", "Sue", "Max", "Anna", "Sam", "Lucy", "Tim", "Zoe", "Jack", "Emma", "Leo"]
ANIMALS = ["dog", "cat", "bird", "bunny", "frog", "duck", "bear", "fox", "mouse", "fish", "pony", "owl"]
PLACES = ["park", "garden", "forest", "beach", "farm", "pond", "hill", "house", "school", "lake"]
THINGS = ["ball", "kite", "box", "hat", "toy", "cake", "book", "boat", "flower", "drum", "cup", "rock"]
COLORS = ["red", "blue", "green", "yellow", "big", "little", "shiny", "soft", "old", "new"]
FEELINGS = ["happy", "sad", "scared", "excited", "tired", "proud", "angry", "surprised"]
VERBS = ["play", "run", "jump", "sing", "dance", "swim", "read", "draw", "climb", "look"]
WEATHER = ["sunny", "rainy", "windy", "cold", "warm", "quiet"]

OPENINGS = [
    "Once upon a time, there was a {adj} {animal} named {name}.",
    "One day, {name} went to the {place} with {pal}.",
    "There was a little girl named {name}. She had a {adj} {thing}.",
    "Once there was a boy named {name} who liked to {verb}.",
    "It was a {weather} day, and {name} wanted to {verb} in the {place}.",
]
MIDDLES = [
    "{name} saw a {adj} {thing} near the {place}.",
    "{name} wanted to {verb} with the {thing}, but it was too high.",
    "{pal} said, \"Can I {verb} with you?\"",
    "{name} felt {feeling} because the {thing} was gone.",
    "They looked everywhere for the {thing}.",
    "The {animal} came out from behind a tree and said hello.",
    "{name} and {pal} ran to the {place} as fast as they could.",
    "Mom said, \"Be careful, {name}. The {place} is far away.\"",
    "The sky was {weather}, so they went inside to {verb}.",
    "{name} shared the {thing} with {pal}, and {pal} smiled.",
    "Then the {animal} jumped into the water with a big splash.",
    "{name} was {feeling}, but {pal} gave {obj} a hug.",
    "They found a {adj} {thing} under a big rock.",
    "{name} tried to {verb}, and it was very fun.",
]
ENDINGS = [
    "From that day on, {name} and {pal} were best friends.",
    "{name} learned that it is good to share.",
    "In the end, {name} was very {feeling} and went home to sleep.",
    "They played all day until the sun went down.",
    "And the {adj} {thing} stayed in the {place} forever.",
]


def story(rng):
    name = rng.choice(NAMES)
    pal = rng.choice([n for n in NAMES if n != name])
    words = {
        "name": name,
        "pal": pal,
        "obj": rng.choice(["her", "him"]),
        "animal": rng.choice(ANIMALS),
        "place": rng.choice(PLACES),
        "thing": rng.choice(THINGS),
    }

    def fill(pattern):
        fresh = dict(words, adj=rng.choice(COLORS), feeling=rng.choice(FEELINGS), verb=rng.choice(VERBS),
                     weather=rng.choice(WEATHER))
        return pattern.format(**fresh)

    sentences = [fill(rng.choice(OPENINGS))]
    sentences += [fill(p) for p in rng.sample(MIDDLES, rng.randint(4, 8))]
    sentences.append(fill(rng.choice(ENDINGS)))
    return " ".join(sentences)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--stories", type=int, default=150, help="how many stories (default 150)")
    parser.add_argument("--seed", type=int, default=2026, help="the draw (default 2026)")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    for _ in range(args.stories):
        print(story(rng))
        print()


if __name__ == "__main__":
    main()
