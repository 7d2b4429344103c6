"""The project's tooling: commands here, the libraries they share in `tools/lib/`.

- `tools/<command>.py` is one command and only that: `python -m tools.<command>` (or its `make` target) parses
  the command line, calls the libraries, prints or writes the result and sets the exit status. A command imports
  libraries, never another command (tests/test_tools_layout.py keeps it so).
- `tools/lib/` holds everything they share, importable without a command line: recording the program under
  Pulumi's mocks (`mockrun`), what `pulumi up` would do (`engine`), the reports behind each command (`drift`,
  `doctor`, `adopt`, `plan_report`, `contracts`, `review/`), and what those share (`inventory`, `planned`: what
  the plan knew of each recorded resource, `risk`, `definitions`, `markdown`, …). Where a command has a library
  of its own it has the command's name.

A new command is `tools/<name>.py` with a `main(argv) -> int`, its logic in `tools/lib/`, and a `make` target.
"""
