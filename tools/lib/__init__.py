"""The libraries the commands in `tools/` share (see tools/__init__.py); nothing here reads the command line
except `cli`, which holds the arguments and error printing that several commands have in common."""
