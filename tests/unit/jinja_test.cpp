// The Jinja subset, one behaviour per test. Expected texts were confirmed with Python's jinja2
// 3.1 in Hugging Face's environment (trim_blocks, lstrip_blocks, loopcontrols, transformers'
// tojson); refusals and error wording are this engine's own.
#include "chat/jinja_template.h"

#include <initializer_list>
#include <string>

#include <gtest/gtest.h>

namespace tpllama::jinja {
namespace {

// The variables every case sees: xs, d, s, n (none), msgs; `u` stays undefined.
Variables test_variables() {
  return {
      {"xs", from_json(nlohmann::ordered_json::parse("[1, 2, 3]"))},
      {"d", from_json(nlohmann::ordered_json::parse(R"({"a": 1, "b": [1, "x"]})"))},
      {"s", Value::string(" hi ")},
      {"n", Value::none()},
      {"msgs",
       from_json(nlohmann::ordered_json::parse(
           R"([{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}])"))},
  };
}

std::string render(const std::string& text, TemplateOptions options = {}) {
  return Template(text, "t", std::move(options)).render(test_variables());
}

struct Case {
  const char* text;
  const char* expected;
};

void expect_renders(std::initializer_list<Case> cases) {
  for (const Case& c : cases) {
    try {
      EXPECT_EQ(render(c.text), c.expected) << "template: " << c.text;
    } catch (const std::exception& e) {
      ADD_FAILURE() << "template: " << c.text << "\nthrew: " << e.what();
    }
  }
}

// The message of the RenderError rendering throws, or "(rendered)".
std::string render_error(const std::string& text) {
  try {
    render(text);
  } catch (const RenderError& e) {
    return e.what();
  }
  return "(rendered)";
}

// The message of the Error loading throws, or "(loaded)".
std::string load_error(const std::string& text) {
  try {
    Template t(text, "t");
  } catch (const Error& e) {
    return e.what();
  }
  return "(loaded)";
}

TEST(Jinja, Literals) {
  expect_renders({
      {"{{ \"a\" ~ 'b' }}", "ab"},
      {"{{ 'tab\\there|\\\\|\\x41|\\u00e9|\\'q\\'|\\\"d\\\"' }}", "tab\there|\\|A|é|'q'|\"d\""},
      {"{{ 1 }} {{ 1.5 }} {{ 1e3 }} {{ 1_000 }} {{ 2.5E-3 }}", "1 1.5 1000.0 1000 0.0025"},
      {"{{ true }} {{ True }} {{ none }} {{ None }} {{ false }}", "True True None None False"},
      {"{{ [1, 'a', none, true, 1.0] }}", "[1, 'a', None, True, 1.0]"},
      {"{{ {'k': 'v', 'n': [1], 2: none} }}", "{'k': 'v', 'n': [1], 2: None}"},
      {"{{ (1,) }} {{ (1, 2) }} {{ () }}", "(1,) (1, 2) ()"},
      {"{{ [\"it's\", 'say \"hi\"', 'both \\' \"', \"tab\\t\", \"\\x01\"] }}",
       "[\"it's\", 'say \"hi\"', 'both \\' \"', 'tab\\t', '\\x01']"},
      {"{{ 'a' 'b' \"c\" }}", "abc"},
      {"{{ u }}|{{ d }}", "|{'a': 1, 'b': [1, 'x']}"},
  });
}

TEST(Jinja, Arithmetic) {
  expect_renders({
      {"{{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 7 "
       "% -3 }}",
       "7 9 3 -4 1 2 -2"},
      {"{{ 2 ** 10 }} {{ 2 ** 3 ** 2 }} {{ -2 ** 2 }} {{ 2 ** -1 }} {{ 7 / 2 }} {{ 4 / 2 }} {{ 1.5 "
       "+ 1 }} {{ true + 1 }} {{ 7.5 // 2 }} {{ -7.5 % 2 }}",
       "1024 64 4 0.5 3.5 2.0 2.5 2 3.0 0.5"},
      {"{{ 'ab' * 3 }} {{ 2 * 'x' }} {{ [1] * 2 }} {{ [1] + [2] }} {{ 'a' + 'b' }} {{ 'x' * 0 }}|",
       "ababab xx [1, 1] [1, 2] ab |"},
      {"{{ 1 ~ 2 }} {{ 'a' ~ none ~ u ~ 1.0 ~ [1] }} {{ 'a' ~ (1 + 2) }}", "12 aNone1.0[1] a3"},
      {"{{ 0.1 + 0.2 }} {{ 1e16 }} {{ 1e15 }} {{ 0.0001 }} {{ 0.00001 }} {{ 1 / 3 }} {{ -0.0 }} {{ "
       "2.5e-10 }} {{ 123456789.125 }} {{ 1e100 }}",
       "0.30000000000000004 1e+16 1000000000000000.0 0.0001 1e-05 0.3333333333333333 -0.0 2.5e-10 "
       "123456789.125 1e+100"},
      {"{{ -3|abs }} {{ - 3 }} {{ +3 }} {{ -(1.5) }}", "3 -3 3 -1.5"},
  });
}

TEST(Jinja, ComparisonsAndLogic) {
  expect_renders({
      {"{{ 1 == 1.0 }} {{ 1 != 2 }} {{ 'a' < 'b' }} {{ [1, 2] < [1, 3] }} {{ 1 < 2 < 3 }} {{ 3 > 2 "
       "> 2 }} {{ 2 >= 2 }} {{ 1 <= 0 }}",
       "True True True True True False True False"},
      {"{{ true == 1 }} {{ none == none }} {{ u == u }} {{ [1, 2] == (1, 2) }} {{ {\"a\": 1, "
       "\"b\": 2} == {\"b\": 2, \"a\": 1} }} {{ none == 0 }}",
       "True True True False True False"},
      {"{{ 'b' in 'abc' }} {{ 2 in xs }} {{ 'a' in d }} {{ 'z' not in d }} {{ 1 in u }} {{ 'ab' in "
       "['ab'] }} {{ not 'a' in 'b' }}",
       "True True True True False True True"},
      {"{{ 0 or 'x' }}|{{ 1 and 'y' }}|{{ '' and 'y' }}|{{ none or 0 }}|{{ not 0 }}|{{ not xs "
       "}}|{{ u or 'dflt' }}|{{ u and 1 }}",
       "x|y||0|True|False|dflt|"},
      {"{{ 'y' if xs else 'n' }}{{ 'y' if [] else 'n' }}|{{ 'only' if false }}|{{ ('only' if "
       "false) is defined }}|{{ 1 if false else 2 if true else 3 }}",
       "yn||False|2"},
      {"{{ not 1 == 2 }} {{ not true and false }} {{ false or true and false }}",
       "True False False"},
  });
}

TEST(Jinja, IndexingAndSlicing) {
  expect_renders({
      {"{{ xs[0] }}{{ xs[-1] }}{{ xs.0 }}|{{ xs[5] }}|{{ xs[true] }}", "131||2"},
      {"{{ xs[1:] }} {{ xs[:-1] }} {{ xs[::-1] }} {{ xs[::2] }} {{ xs[5:] }} {{ xs[-2:] }} {{ "
       "xs[-10:1] }} {{ xs[2:0:-1] }} {{ xs[:] }}",
       "[2, 3] [1, 2] [3, 2, 1] [1, 3] [] [2, 3] [1] [3, 2] [1, 2, 3]"},
      {"{{ 'héllo'[1] }} {{ 'héllo'[1:3] }} {{ 'héllo'[::-1] }} {{ 'héllo'|length }} {{ "
       "'héllo'[-1] }}",
       "é él olléh 5 o"},
      {"{{ d.a }}{{ d['a'] }}{{ d.b[1] }}|{{ d.zz }}|{{ d['zz'] is defined }}{{ msgs[0].role }}{{ "
       "msgs[1]['content'] }}",
       "11x||Falseusery"},
      {"{{ (1, 2)[1:] }} {{ ('a', 'b')[0] }} {{ {1: 'int key'}[1.0] }}", "(2,) a int key"},
      {"{{ n.attr is defined }} {{ 5[0] is defined }} {{ 'abc'.nope is defined }}",
       "False False False"},
  });
}

TEST(Jinja, StringMethods) {
  expect_renders({
      {"{{ s.strip() }}|{{ s.lstrip() }}|{{ s.rstrip() }}|{{ 'xxhixx'.strip('x') }}|{{ "
       "'\\u3000x\\u00a0\\n'.strip() }}|{{ 'abcba'.lstrip('ab') }}",
       "hi|hi | hi|hi|x|cba"},
      {"{{ ' a  b '.split() }} {{ 'a,b,,c'.split(',') }} {{ 'a b c'.split(' ', 1) }} {{ ' a b  c "
       "'.split(none, 1) }} {{ ''.split() }} {{ ''.split(',') }}",
       "['a', 'b'] ['a', 'b', '', 'c'] ['a', 'b c'] ['a', 'b  c '] [] ['']"},
      {"{{ 'Hello'.upper() }} {{ 'Hello'.lower() }} {{ 'hello world'.title() }} {{ "
       "\"they're\".title() }} {{ 'aXb'.capitalize() }}",
       "HELLO hello Hello World They'Re Axb"},
      {"{{ 'abc'.startswith('ab') }} {{ 'abc'.endswith(('x', 'c')) }} {{ 'abc'.startswith('abcd') "
       "}}",
       "True True False"},
      {"{{ 'aaa'.replace('a', 'b', 2) }} {{ 'abc'.replace('', '-') }} {{ 'abcabc'.find('c') }} {{ "
       "'héllo'.find('l') }} {{ 'abc'.find('z') }} {{ 'abcabc'.count('bc') }} {{ '-'.join(['a', "
       "'b']) }}",
       "bba -a-b-c- 2 2 -1 2 a-b"},
      {"{{ d.keys()|list }} {{ d.values()|list }} {{ d.items()|list }} {{ d.get('a') }} {{ "
       "d.get('zz') }} {{ d.get('zz', 5) }}",
       "['a', 'b'] [1, [1, 'x']] [('a', 1), ('b', [1, 'x'])] 1 None 5"},
  });
}

TEST(Jinja, Filters) {
  expect_renders({
      {"{{ s|trim }}|{{ 'xxhixx'|trim('x') }}|{{ u|trim }}|{{ n|trim }}|{{ 5|trim }}",
       "hi|hi||None|5"},
      {"{{ xs|length }} {{ d|count }} {{ 'héllo'|length }} {{ u|length }} {{ ''|length }}",
       "3 2 5 0 0"},
      {"{{ 'hello World'|upper }} {{ 'HeLLo'|lower }} {{ 'hello WORLD'|capitalize }} {{ \"they're "
       "bill-s(x [y\"|title }} {{ n|upper }}",
       "HELLO WORLD hello Hello world They're Bill-S(X [Y NONE"},
      {"{{ u|default('dflt') }}|{{ n|default('dflt') }}|{{ ''|default('dflt', true) }}|{{ 0|d('z', "
       "boolean=true) }}|{{ 'set'|d('z') }}|{{ u|default }}|",
       "dflt|None|dflt|z|set||"},
      {"{{ xs|join(', ') }}|{{ xs|join }}|{{ [d, d]|join('/', attribute='a') }}|{{ [1, none, "
       "u]|join(',') }}|{{ 'abc'|join('.') }}|{{ u|join(',') }}",
       "1, 2, 3|123|1/1|1,None,|a.b.c|"},
      {"{{ xs|first }}{{ xs|last }}{{ 'abc'|first }}{{ 'abc'|last }}{{ d|first }}{{ d|last }}|{{ "
       "[]|first }}|",
       "13acab||"},
      {"{{ 'aaa'|replace('a', 'b') }} {{ 'aaa'|replace('a', 'b', 1) }} {{ 1.5|replace('.', ',') }}",
       "bbb baa 1,5"},
      {"{{ 1|string ~ n|string }} {{ [1]|string }} {{ u|string }}|", "1None [1] |"},
      {"{{ '42'|int + 1 }} {{ '3.7'|int }} {{ 'x'|int }} {{ 'x'|int(7) }} {{ 3.9|int }} {{ "
       "true|int }} {{ ' 4 '|int }} {{ '-5'|int }} {{ n|int }}",
       "43 3 0 7 3 1 4 -5 0"},
      {"{{ '1.5'|float }} {{ 2|float }} {{ 'x'|float }} {{ ' 2e3 '|float }}", "1.5 2.0 0.0 2000.0"},
      {"{{ 'ab'|list }} {{ d|list }} {{ xs|reverse|list }} {{ 'abc'|reverse }} {{ u|list }} {{ (1, "
       "2)|list }}",
       "['a', 'b'] ['a', 'b'] [3, 2, 1] cba [] [1, 2]"},
      {"{{ d|items|list }} {{ u|items|list }}", "[('a', 1), ('b', [1, 'x'])] []"},
      {"{{ xs|select('odd')|list }} {{ xs|reject('odd')|list }} {{ [0, 1, '', 'a']|select|list }} "
       "{{ msgs|selectattr('role', 'equalto', 'user')|list|length }} {{ msgs|rejectattr('role', "
       "'eq', 'user')|map(attribute='content')|list }} {{ xs|select('gt', 1)|list }} {{ "
       "xs|select('in', [1, 3])|list }}",
       "[1, 3] [2] [1, 'a'] 1 ['y'] [2, 3] [1, 3]"},
      {"{{ xs|map('string')|join('-') }} {{ msgs|map(attribute='role')|list }} {{ [d, "
       "{}]|map(attribute='a', default=0)|list }} {{ ['a', 'b']|map('upper')|list }} {{ [' a "
       "']|map('trim')|first }}",
       "1-2-3 ['user', 'assistant'] [1, 0] ['A', 'B'] a"},
      {"{{ 'x'|safe }} {{ -2.5|abs }}", "x 2.5"},
  });
}

TEST(Jinja, ToJson) {
  expect_renders({
      {"{{ d|tojson }}", "{\"a\": 1, \"b\": [1, \"x\"]}"},
      {"{{ d|tojson(indent=2) }}", "{\n  \"a\": 1,\n  \"b\": [\n    1,\n    \"x\"\n  ]\n}"},
      {"{{ 'é\\n\"\\\\\\t\\x01'|tojson }}", "\"é\\n\\\"\\\\\\t\\u0001\""},
      {"{{ [1.0, 1e16, 1e-7, none, true, false, -0.5, 100]|tojson }}",
       "[1.0, 1e+16, 1e-07, null, true, false, -0.5, 100]"},
      {"{{ {'b': 1, 'a': 2}|tojson(sort_keys=true) }} {{ [1, {'a': []}]|tojson(separators=(',', "
       "':')) }}",
       "{\"a\": 2, \"b\": 1} [1,{\"a\":[]}]"},
      {"{{ 'é😀'|tojson(ensure_ascii=true) }} {{ 'é😀'|tojson }}",
       "\"\\u00e9\\ud83d\\ude00\" \"é😀\""},
      {"{{ {}|tojson(indent=4) }} {{ []|tojson(indent=4) }} {{ {'a': {}, 'b': "
       "[[]]}|tojson(indent=1) }}",
       "{} [] {\n \"a\": {},\n \"b\": [\n  []\n ]\n}"},
      {"{{ {'k': [1, 2]}|tojson(indent='\\t') }}", "{\n\t\"k\": [\n\t\t1,\n\t\t2\n\t]\n}"},
      {"{{ {1: 'a', none: 'b', true: 'c', 1.5: 'd'}|tojson }}",
       "{\"1\": \"c\", \"null\": \"b\", \"1.5\": \"d\"}"},
      {"{{ msgs|tojson(false, 2) }}",
       "[\n  {\n    \"role\": \"user\",\n    \"content\": \"x\"\n  },\n  {\n    \"role\": "
       "\"assistant\",\n    \"content\": \"y\"\n  }\n]"},
  });
}

TEST(Jinja, Tests) {
  expect_renders({
      {"{{ u is defined }} {{ u is undefined }} {{ n is none }} {{ 'a' is string }} {{ d is "
       "mapping }} {{ xs is mapping }}",
       "False True True True True False"},
      {"{{ xs is iterable }} {{ 5 is iterable }} {{ 'a' is iterable }} {{ u is iterable }} {{ d is "
       "sequence }} {{ 5 is sequence }}",
       "True False True True True False"},
      {"{{ 1.5 is number }} {{ true is number }} {{ 'a' is number }} {{ 1 is integer }} {{ true is "
       "integer }} {{ 1.0 is float }} {{ true is boolean }} {{ 1 is boolean }}",
       "True True False True False True True False"},
      {"{{ true is true }} {{ 1 is true }} {{ false is false }} {{ 0 is false }} {{ 3 is odd }} {{ "
       "4 is even }} {{ 9 is divisibleby 3 }} {{ 9 is divisibleby(4) }}",
       "True False True False True True True False"},
      {"{{ 'a' is eq 'a' }} {{ 'a' is equalto('b') }} {{ 2 is gt 1 }} {{ 2 is lt 1 }} {{ 2 is ge 2 "
       "}} {{ 2 is le 1 }} {{ 2 is ne 2 }} {{ 2 is in xs }} {{ xs is sameas xs }} {{ n is sameas "
       "none }}",
       "True False True False True False False True True True"},
      {"{{ 'abc' is lower }} {{ 'ABC' is upper }} {{ 'aBc' is lower }} {{ 1 is not none }} {{ not "
       "u is defined }} {{ u is not defined }} {{ u is callable }}",
       "True True False True True True True"},
  });
}

TEST(Jinja, SetAndScoping) {
  expect_renders({
      {"{% set x = 1 %}{% set y, z = [2, 3] %}{% set (p, q) = 'ab' %}{{ x }}{{ y }}{{ z }}", "123"},
      {"{% set t = 1, 2 %}{{ t }}", "(1, 2)"},
      {"{% set b %}in {{ xs|length }}{% endset %}[{{ b }}]", "[in 3]"},
      {"{% set x = 1 %}{% for i in xs %}{% set x = i %}{{ x }}{% endfor %}|{{ x }}", "123|1"},
      {"{% for i in [1, 2] %}{% if i == 1 %}{% set x = 'a' %}{% endif %}[{{ x }}]{% endfor %}",
       "[a][]"},
      {"{% set ns = namespace(count=0, found=false) %}{% for i in xs %}{% set ns.count = ns.count "
       "+ i %}{% if i == 2 %}{% set ns.found = true %}{% endif %}{% endfor %}{{ ns.count }} {{ "
       "ns.found }} {{ ns.missing is defined }}",
       "6 True False"},
      {"{% set ns = namespace({'a': 1}, b=2) %}{{ ns.a }}{{ ns.b }}", "12"},
      {"{% if true %}{% set inner = 'set in if' %}{% endif %}{{ inner }}", "set in if"},
      {"{% set msgs = msgs[1:] %}{{ msgs|length }}", "1"},
  });
}

TEST(Jinja, ForLoops) {
  expect_renders({
      {"{% for x in xs %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 "
       "}}{{ loop.first }}{{ loop.last }}{{ loop.length }}{{ loop.previtem }}{{ loop.nextitem }}{{ "
       "loop.cycle('a', 'b') }}{{ loop.depth }}{{ loop.depth0 }};{% endfor %}",
       "1032TrueFalse32a10;2121FalseFalse313b10;3210FalseTrue32a10;"},
      {"{% for x in xs if x > 1 %}{{ x }}:{{ loop.index }}/{{ loop.length }} {% else %}none{% "
       "endfor %}",
       "2:1/2 3:2/2 "},
      {"{% for x in [] %}x{% else %}empty{% endfor %}|{% for x in xs if x > 5 %}x{% else "
       "%}filtered out{% endfor %}|{% for x in u %}x{% else %}undefined{% endfor %}",
       "empty|filtered out|undefined"},
      {"{% for a in [1, 2] %}{% for b in 'xy' %}{{ a }}{{ b }}{{ loop.depth }}{{ loop.index }} {% "
       "endfor %}{{ loop.index }}|{% endfor %}",
       "1x11 1y12 1|2x11 2y12 2|"},
      {"{% for k in d %}{{ k }}{% endfor %} {% for c in 'héllo' %}{{ c }}.{% endfor %} {% for k, v "
       "in d.items() %}{{ k }}={{ v }};{% endfor %} {% for k, v in d|items %}{{ k }}{% endfor %}",
       "ab h.é.l.l.o. a=1;b=[1, 'x']; ab"},
      {"{% for x in [1, 2, 3, 4, 5] %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 4 %}{% "
       "break %}{% endif %}{{ x }}{% endfor %}",
       "13"},
      {"{% for x in xs %}{% for y in xs %}{% if y == 2 %}{% break %}{% endif %}{{ x }}{{ y }} {% "
       "endfor %}{% endfor %}",
       "11 21 31 "},
      {"{% for x in [1, 2, 3] %}{% if x == 1 %}one{% elif x == 2 %}two{% else %}many{% endif %} {% "
       "endfor %}",
       "one two many "},
      {"{% for m in msgs %}{% if loop.previtem and loop.previtem.role != m.role %}switch {% endif "
       "%}{{ m.role }} {% endfor %}",
       "user switch assistant "},
  });
}

TEST(Jinja, Macros) {
  expect_renders({
      {"{% macro greet(name, greeting='Hello', punct='!') %}{{ greeting }}, {{ name }}{{ punct "
       "}}{% endmacro %}{{ greet('Ann') }}|{{ greet('Bob', 'Hi') }}|{{ greet('Cy', punct='?') "
       "}}|{{ greet() }}|",
       "Hello, Ann!|Hi, Bob!|Hello, Cy?|Hello, !|"},
      {"{% macro m(a) %}{{ a }}{{ varargs }}{{ kwargs }}{% endmacro %}{{ m(1, 2, 3, k=4) }}",
       "1(2, 3){'k': 4}"},
      {"{% macro fact(n) %}{% if n <= 1 %}1{% else %}{{ n * fact(n - 1)|int }}{% endif %}{% "
       "endmacro %}{{ fact(5) }}",
       "120"},
      {"{% macro m(a, b=a * 2) %}{{ b }}{% endmacro %}{{ m(3) }}", "6"},
      {"{% macro show() %}[{{ i }}]{% endmacro %}{% for i in [1] %}{{ show() }}{% endfor %}", "[]"},
      {"{% set g = 'G' %}{% macro show() %}{{ g }}{% endmacro %}{{ show() }}", "G"},
      {"{% macro show() %}{{ g }}{% endmacro %}{% set g = 'late' %}{{ show() }}", "late"},
      {"{% macro wrap(x) %}<{{ x }}>{% endmacro %}{{ wrap(wrap('a')) }} {{ wrap('b') ~ '!' }} {{ "
       "(wrap('c') + 'd')|upper }}",
       "<<a>> <b>! <C>D"},
      {"{% macro m() %}{% set local = 1 %}{{ local }}{% endmacro %}{{ m() }}{{ local is defined }}",
       "1False"},
  });
}

TEST(Jinja, CommentsAndRaw) {
  expect_renders({
      {"a{# comment #}b", "ab"},
      {"a {#- trimmed -#} b", "ab"},
      {"{% raw %}{{ not rendered }} {% if %}{% endraw %}", "{{ not rendered }} {% if %}"},
      {"a\n  {%- raw %} x {% endraw -%}\n  b", "a x b"},
      {"{# multi\nline #}x", "x"},
  });
}

TEST(Jinja, WhitespaceControl) {
  expect_renders({
      {"a  {{- 'b' -}}  c", "abc"},
      {"a\n  {%- if true %}b{% endif -%}\n  c", "abc"},
      {"a {%- if true -%} b {%- endif -%} c", "abc"},
      {"  {{- ' padded ' }}|", " padded |"},
      {"x\n\n\n{{- 'y' }}", "xy"},
      {"a\t\n {%- set x = 1 %}b", "ab"},
  });
}

TEST(Jinja, TrimBlocksAndLstripBlocks) {
  expect_renders({
      {"{% if true %}\nyes\n{% endif %}\nafter", "yes\nafter"},
      {"line\n    {% if true %}\n    x\n    {% endif %}\nend", "line\n    x\nend"},
      {"  {%+ if true %}x{% endif %}", "  x"},
      {"{% if true +%}\nx{% endif %}", "\nx"},
      {"  {{ 'x' }}", "  x"},
      {"a  {% if true %}b{% endif %}", "a  b"},
      {"  {# c #}\nx", "x"},
      {"{% for x in xs %}\n  {{ x }}\n{% endfor %}\n", "  1\n  2\n  3\n"},
      {"x\n", "x"},
      {"x\n\n", "x\n"},
      {"a\r\nb\rc", "a\nb\nc"},
      {"{% if true %}  \nkept spaces before newline{% endif %}", "  \nkept spaces before newline"},
      {"\t{% if true %}tab stripped{% endif %}", "tab stripped"},
      {"{{ 'x' }}\n{% if true %}y{% endif %}", "x\ny"},
  });
}

TEST(Jinja, SortFilters) {
  expect_renders({
      {"{{ ['b', 'A', 'a', 'C']|sort }} {{ ['b', 'A', 'a', 'C']|sort(case_sensitive=true) }} {{ "
       "[3, 1, 2]|sort(reverse=true) }} {{ "
       "msgs|sort(attribute='role')|map(attribute='content')|list }}",
       "['A', 'a', 'b', 'C'] ['A', 'C', 'a', 'b'] [3, 2, 1] ['y', 'x']"},
      {"{{ {'b': 1, 'A': 3, 'a': 2}|dictsort }} {{ {'b': 1, 'a': 2}|dictsort(by='value', "
       "reverse=true) }}",
       "[('A', 3), ('a', 2), ('b', 1)] [('a', 2), ('b', 1)]"},
  });
}

TEST(Jinja, PythonCornerCases) {
  expect_renders({
      {"{{ 1 // 0.1 }} {{ 1 % 0.1 }} {{ -1 // 0.3 }} {{ 5.5 % -2 }} {{ 0.0 // -1 }}",
       "9.0 0.09999999999999995 -4.0 -0.5 -0.0"},
      {"{{ 1e-5 is odd }} {{ 3.0 is odd }} {{ 4.0 is even }} {{ 7.5 is divisibleby 2.5 }}",
       "False True True True"},
      {"{{ {(1, 2): 'tuple key'}[1, 2] }} {{ d['a', 'b'] is defined }}", "tuple key False"},
      {"{{ xs|safe ~ '!' }} {{ (xs|safe)[0] }} {{ n|safe }}", "[1, 2, 3]! [ None"},
      {"{{ 'é'|upper }}{{ 'ß'|upper }} {{ 'ÀÉÎ'|lower }} {{ 'ΑΒΓ'|lower }} {{ 'привет'|upper }} {{ "
       "'ŁÓDŹ'|lower }}",
       "ÉSS àéî αβγ ПРИВЕТ łódź"},
      {"{{ 'élan vital'|title }} {{ 'élan vital'.title() }} {{ 'ÉLAN'|capitalize }} {{ "
       "'straße'.title() }} {{ 'ÀB' is upper }}",
       "Élan Vital Élan Vital Élan Straße True"},
      {"{{ (msgs[0].items()|list)[0] }} {{ xs.count(2) }} {{ xs.index(3) }}",
       "('role', 'user') 1 2"},
  });
}

TEST(Jinja, GenerationTagRendersItsBody) {
  // Hugging Face's AssistantTracker tag only marks where assistant text went.
  expect_renders({{"a{% generation %}[{{ xs|length }}]{% endgeneration %}b", "a[3]b"}});
}

TEST(Jinja, TrimAndLstripCanBeTurnedOff) {
  TemplateOptions plain;
  plain.trim_blocks = false;
  plain.lstrip_blocks = false;
  EXPECT_EQ(render("  {% if true %}\nx\n  {% endif %}\ny", plain), "  \nx\n  \ny");
}

TEST(Jinja, ExtraMacroArgumentsNeedVarargsOrKwargs) {
  EXPECT_EQ(render_error("{% macro m(a) %}{{ a }}{% endmacro %}{{ m(1, 2) }}"),
            "t line 1: macro 'm' takes not more than 1 argument(s)");
  EXPECT_EQ(render_error("{% macro m(a) %}{{ a }}{% endmacro %}{{ m(1, z=2) }}"),
            "t line 1: macro 'm' takes no keyword argument 'z'");
}

TEST(Jinja, RenderErrorsNameTheLineAndMatchJinjaWording) {
  EXPECT_EQ(render_error("a\n\n{{ u.x }}"), "t line 3: 'u' is undefined");
  EXPECT_EQ(render_error("{{ d.zz.y }}"), "t line 1: 'dict object' has no attribute 'zz'");
  EXPECT_EQ(render_error("{{ 'a' + 1 }}"),
            "t line 1: can only concatenate str (not \"int\") to str");
  EXPECT_EQ(render_error("{{ 1 + 'a' }}"),
            "t line 1: unsupported operand type(s) for +: 'int' and 'str'");
  EXPECT_EQ(render_error("{{ u + 1 }}"), "t line 1: 'u' is undefined");
  EXPECT_EQ(render_error("{% for x in 5 %}{% endfor %}"), "t line 1: 'int' object is not iterable");
  EXPECT_EQ(render_error("{{ n.strip() }}"), "t line 1: 'None' has no attribute 'strip'");
  EXPECT_EQ(render_error("{{ xs.strip() }}"), "t line 1: 'list object' has no attribute 'strip'");
  EXPECT_EQ(render_error("{{ 1 / 0 }}"), "t line 1: division by zero");
  EXPECT_EQ(render_error("{{ 7 // 0 }}"), "t line 1: integer division or modulo by zero");
  EXPECT_EQ(render_error("{{ 'a' < 1 }}"),
            "t line 1: '<' not supported between instances of 'str' and 'int'");
  EXPECT_EQ(render_error("{{ n|length }}"), "t line 1: object of type 'NoneType' has no len()");
  EXPECT_EQ(render_error("{{ u|tojson }}"),
            "t line 1: Object of type Undefined is not JSON serializable");
  EXPECT_EQ(render_error("{{ u|int }}"), "t line 1: 'u' is undefined");
  EXPECT_EQ(render_error("{{ xs[0]() }}"), "t line 1: 'int' object is not callable");
  EXPECT_EQ(render_error("{% for a, b in [[1, 2, 3]] %}{% endfor %}"),
            "t line 1: too many values to unpack (expected 2)");
  EXPECT_EQ(render_error("{% set s.attr = 1 %}"),
            "t line 1: cannot assign attribute 'attr' on non-namespace object 's'");
  EXPECT_EQ(render_error("{{ 1 in 5 }}"), "t line 1: argument of type 'int' is not iterable");
  EXPECT_EQ(render_error("{{ 1 in 'abc' }}"),
            "t line 1: 'in <string>' requires string as left operand, not int");
  EXPECT_EQ(render_error("{{ xs[::0] }}"), "t line 1: slice step cannot be zero");
  EXPECT_EQ(render_error("{{ '%s' % 1 }}"),
            "t line 1: printf-style string formatting ('%' on a str) is not supported");
}

TEST(Jinja, PythonTypeErrorsAreRenderErrors) {
  EXPECT_EQ(render_error("{{ 'a'.count(1) }}"), "t line 1: count() argument must be str, not int");
  EXPECT_EQ(render_error("{{ 'a'.split(1) }}"), "t line 1: split() argument must be str, not int");
  // A slice compiles to a plain Python subscript, so unlike an index it raises.
  EXPECT_EQ(render_error("{{ n[1:] }}"), "t line 1: 'NoneType' object is not subscriptable");
  EXPECT_EQ(render_error("{{ d[1:] }}"), "t line 1: unhashable type: 'slice'");
  EXPECT_EQ(render_error("{{ {[1]: 2} }}"), "t line 1: unhashable type: 'list'");
  EXPECT_EQ(render_error("{{ [1] in d }}"), "t line 1: unhashable type: 'list'");
  EXPECT_EQ(render_error("{{ 2 ** 64 }}"),
            "t line 1: integer overflow: results beyond 64 bits are not supported");
}

TEST(Jinja, ErrorLineIsTheExpressionsLineInAMultilineTag) {
  EXPECT_EQ(render_error("{{ 1 +\n  u.x }}"), "t line 2: 'u' is undefined");
  EXPECT_EQ(render_error("{% for x in xs %}\n{% if x == 2 %}\n{{ x.y.z }}{% endif %}{% endfor %}"),
            "t line 3: 'int object' has no attribute 'y'");
}

TEST(Jinja, RunawayRecursionFailsCleanly) {
  EXPECT_EQ(render_error("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}"),
            "t line 1: maximum recursion depth exceeded in macro 'f'");
}

TEST(Jinja, UnsupportedConstructsAreRefusedAtLoadWithTheirLine) {
  EXPECT_EQ(load_error("{% include 'x' %}"), "t line 1: unsupported tag 'include'");
  EXPECT_EQ(load_error("a\n{{ x | wordwrap }}"), "t line 2: unknown filter 'wordwrap'");
  EXPECT_EQ(load_error("\n\n{% call m() %}x{% endcall %}"), "t line 3: unsupported tag 'call'");
  EXPECT_EQ(load_error("{% extends 'base.html' %}"), "t line 1: unsupported tag 'extends'");
  EXPECT_EQ(load_error("{% import 'm' as m %}"), "t line 1: unsupported tag 'import'");
  EXPECT_EQ(load_error("{% block b %}{% endblock %}"), "t line 1: unsupported tag 'block'");
  EXPECT_EQ(load_error("{% filter upper %}x{% endfilter %}"), "t line 1: unsupported tag 'filter'");
  EXPECT_EQ(load_error("{% with a = 1 %}{% endwith %}"), "t line 1: unsupported tag 'with'");
  EXPECT_EQ(load_error("{% do xs.append(1) %}"), "t line 1: unsupported tag 'do'");
  EXPECT_EQ(load_error("{% if x is foo %}{% endif %}"), "t line 1: unknown test 'foo'");
  EXPECT_EQ(load_error("{{ xs.append(4) }}"), "t line 1: unsupported method 'append'");
  // Jinja would only fail when the call runs; no variable can hold a callable here, so refuse
  // early.
  EXPECT_EQ(load_error("{{ foo() }}"),
            "t line 1: unknown function 'foo' (not a macro or a known global)");
  EXPECT_EQ(load_error("{% for x in xs recursive %}{% endfor %}"),
            "t line 1: unsupported loop modifier 'recursive'");
  EXPECT_EQ(load_error("{{ f(*xs) }}"), "t line 1: unsupported '*' argument unpacking");
  EXPECT_EQ(load_error("{% set x | upper %}a{% endset %}"),
            "t line 1: unsupported filter on a block set");
  EXPECT_EQ(load_error("{{ 'a' | format(1) }}"), "t line 1: unknown filter 'format'");
}

TEST(Jinja, MalformedTemplatesAreRefusedAtLoadWithTheirLine) {
  EXPECT_EQ(load_error("{% if x %}\nno end"),
            "t line 2: unexpected end of template, expected 'endif'");
  EXPECT_EQ(load_error("{% for x in xs %}"),
            "t line 1: unexpected end of template, expected 'endfor'");
  EXPECT_EQ(load_error("{{ x"), "t line 1: unexpected end of template, expected '}}'");
  EXPECT_EQ(load_error("{% endfor %}"), "t line 1: unexpected tag 'endfor'");
  EXPECT_EQ(load_error("x\n{# unclosed"), "t line 2: missing end of comment tag ('#}')");
  EXPECT_EQ(load_error("{% raw %}never closed"),
            "t line 1: missing end of raw directive ('{% endraw %}')");
  EXPECT_EQ(load_error("{% break %}"), "t line 1: 'break' outside a for loop");
  EXPECT_EQ(load_error("{{ (1 }}"), "t line 1: unexpected '}', expected ')'");
  EXPECT_EQ(load_error("{{ 1 ) }}"), "t line 1: unexpected ')'");
  EXPECT_EQ(load_error("{{ 'open }}"), "t line 1: unterminated string starting with 'open }}");
  EXPECT_EQ(load_error("{{ 1 + }}"), "t line 1: unexpected end of print statement");
  EXPECT_EQ(load_error("{% macro m(a=1, b) %}{% endmacro %}"),
            "t line 1: non-default argument 'b' follows default argument");
  EXPECT_EQ(load_error("{{ 'x' ! 'y' }}"), "t line 1: unexpected character '!' in tag");
  // Jinja parses an if condition without the inline `a if b else c`.
  EXPECT_EQ(load_error("{% if 1 if true else 2 %}x{% endif %}"),
            "t line 1: expected end of statement block, got 'if'");
  EXPECT_EQ(load_error("{{ 007 }}"), "t line 1: leading zeros in an integer literal: 007");
  EXPECT_EQ(load_error("{{ 'x' is defined(1) }}"), "t line 1: test 'defined' takes no arguments");
}

TEST(Jinja, ParseOnceRenderManyWithDifferentVariables) {
  const Template t("{% for m in messages %}{{ m }};{% endfor %}", "t");
  for (int n = 0; n < 3; ++n) {
    std::vector<Value> items;
    for (int i = 0; i < n; ++i) items.push_back(Value::integer(i));
    const std::string expected = n == 0 ? "" : n == 1 ? "0;" : "0;1;";
    EXPECT_EQ(t.render({{"messages", Value::list(items)}}), expected);
  }
}

}  // namespace
}  // namespace tpllama::jinja
