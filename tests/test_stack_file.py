"""Reading `Pulumi.<stack>.yaml`: a mistake in the file is one clear line naming the file, line and column
(never a traceback, never a secret), and no secure value reaches the program."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from components.config.pulumi_yaml import SECRET_MARKER, StackFileError, load, stack_config
from tools.lib.mockrun import ROOT

CIPHERTEXT = "v1:Zm9yLXRoZS10ZXN0cy1vbmx5LWRpc3RpbmN0aXZl"
"""A distinctive fake `secure:` value: it must never be printed."""

DUPLICATED_DELAYS = """\
config:
  rabbitmq-retry:vhosts:
    - name: shop
      queues:
        - name: orders
          retry:
            delays: [1s, 10s]
            delays: [1s, 10m]
"""


def write(tmp_path: Path, text: str, stack: str = "broken") -> Path:
    path = tmp_path / f"Pulumi.{stack}.yaml"
    path.write_text(text)
    return path


def problem(path: Path) -> str:
    with pytest.raises(StackFileError) as error:
        load(path)
    return str(error.value)


def test_a_duplicate_key_anywhere_is_an_error_naming_both_places(tmp_path: Path):
    assert problem(write(tmp_path, DUPLICATED_DELAYS)) == (
        'Pulumi.broken.yaml:8:13: duplicate key "delays" (first at line 7, column 13); keep one')
    top_level = "config:\n  rabbitmq-retry:protect: true\n  rabbitmq-retry:protect: false\n"
    assert problem(write(tmp_path, top_level)) == (
        'Pulumi.broken.yaml:3:3: duplicate key "rabbitmq-retry:protect" (first at line 2, column 3); keep one')


def test_a_merge_key_may_still_be_overridden(tmp_path: Path):
    text = "x-defaults: &defaults {queue_type: classic, policy_priority: 5}\n" \
           "config:\n  rabbitmq-retry:defaults:\n    <<: *defaults\n    policy_priority: 7\n"
    assert load(write(tmp_path, text)) == {"rabbitmq-retry:defaults": {"queue_type": "classic", "policy_priority": 7}}


@pytest.mark.parametrize(("text", "expected"), [
    ("config:\n  a: b\n   c: d\n", "Pulumi.broken.yaml:3:5: a `key:` where none can start: a line indented deeper "
                                  "than the key above it, which already has a value (align it with that key), or a "
                                  "second `key:` on one line (quote a value that contains `: `)"),
    ("config:\n\ta: b\n", "Pulumi.broken.yaml:2:1: a tab character; indent with spaces"),
    ("config:\n  rabbitmq-retry:vhosts: [\n", "Pulumi.broken.yaml:3:1: the file ends inside a value; close every "
                                              "`[`, `{` and quote it opens"),
    # The mistake's line (6: `]` missing), not the next one where the parser noticed it.
    ("config:\n  v:\n    - name: q1\n      bindings: [{exchange: orders}\n    - name: q2\n",
     "Pulumi.broken.yaml:4:17: this `[` is not closed: expected `,` or `]` before line 5, column 5"),
    ("config:\n  a:\n    - name: q1\n      retry:\n        delays: [1s]\n       max_retries: 3\n",
     "Pulumi.broken.yaml:6:8: this line is indented differently from the entries it follows (the block starting at "
     "line 3); indent it like its siblings, or add the missing `- ` of a list entry"),
    ("config:\n  a: 'abc\n  b: 1\n", "Pulumi.broken.yaml:2:6: this quoted string is not closed (no closing quote "
                                     "before line 4, column 1)"),
    ("rabbitmq-retry:vhosts: []\n", "Pulumi.broken.yaml: no `config:` key; rabbitmq-retry:vhosts must be indented "
                                    "under `config:` (see Pulumi.dev.yaml)"),
    ("- config\n", "Pulumi.broken.yaml: expected a mapping with a `config:` key, got a list"),
    ("just text\n", "Pulumi.broken.yaml: expected a mapping with a `config:` key, got a string"),
    ("config: [a, b]\n", "Pulumi.broken.yaml: `config:` must be a mapping of key: value, got a list"),
    ("config: 3\n", "Pulumi.broken.yaml: `config:` must be a mapping of key: value, got a number"),
])
def test_syntax_and_shape_errors_name_the_file_line_and_column(tmp_path: Path, text: str, expected: str):
    assert problem(write(tmp_path, text)) == expected


def test_an_empty_file_or_config_is_no_config(tmp_path: Path):
    assert load(write(tmp_path, "")) == {} and load(write(tmp_path, "config:\n")) == {}


def test_a_syntax_error_next_to_a_secret_does_not_print_it(tmp_path: Path):
    text = f"config:\n  rabbitmq:password:\n    secure: {CIPHERTEXT}\n   oops: [\n"
    message = problem(write(tmp_path, text))
    assert message.startswith("Pulumi.broken.yaml:4:") and CIPHERTEXT not in message


def test_secure_values_become_placeholders_that_change_with_the_ciphertext(tmp_path: Path):
    def config(ciphertext: str) -> tuple[dict[str, str], list[str]]:
        return stack_config(write(tmp_path, "config:\n  rabbitmq-retry:passwords:\n"
                                            f"    billing-app:\n      secure: {ciphertext}\n  rabbitmq:username: u\n"))

    values, secret_keys = config(CIPHERTEXT)
    assert secret_keys == ["rabbitmq-retry:passwords"] and values["rabbitmq:username"] == "u"
    placeholder = json.loads(values["rabbitmq-retry:passwords"])["billing-app"]
    assert placeholder.startswith(SECRET_MARKER) and CIPHERTEXT not in json.dumps(values)
    assert config(CIPHERTEXT)[0] == values
    assert json.loads(config(CIPHERTEXT + "x")[0]["rabbitmq-retry:passwords"])["billing-app"] != placeholder


@pytest.mark.parametrize("tool", ["tools.mockrun", "tools.plan_report"])
def test_the_commands_print_one_error_line_and_exit_1(program_copy: Path, tool: str):
    write(program_copy, DUPLICATED_DELAYS)
    result = subprocess.run([sys.executable, "-m", tool, "--stack", "broken", "--root", str(program_copy)],
                            cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert (result.returncode, result.stdout) == (1, "")
    assert result.stderr == ('error: Pulumi.broken.yaml:8:13: duplicate key "delays" (first at line 7, column 13); '
                             "keep one\n")
    missing = subprocess.run([sys.executable, "-m", tool, "--stack", "nope", "--root", str(program_copy)],
                             cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert missing.returncode == 1 and missing.stderr.startswith("error: Pulumi.nope.yaml not found in ")
    assert missing.stderr.endswith("(its stacks: broken)\n"), "the stacks there, so a misspelt STACK= shows the name"
    assert "Traceback" not in missing.stderr


def test_make_review_names_a_missing_stack_file_as_the_other_commands_do(program_copy: Path, capsys):
    from tools import review

    write(program_copy, DUPLICATED_DELAYS)
    assert review.main(["--base", "HEAD", "--stack", "nope", "--root", str(program_copy)]) == 1
    assert capsys.readouterr().err == (f"error: Pulumi.nope.yaml not found in {program_copy.resolve()}: "
                                       "is STACK=nope a stack of this project? (its stacks: broken)\n")
