"""The bottom layer: pure data and primitives every other layer reads (names, durations, the wire table, the
config's and the plan's types, the parse primitives, problems); it imports no other layer and no Pulumi."""
