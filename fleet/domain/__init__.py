"""The pure domain layer: models and rules over plain data.

Nothing here opens a socket, runs a command or reads the clock; callers pass `today`/`now` in, so
every rule is a deterministic function that tests can pin. The only I/O allowed is loaders reading
a file the caller named (the matrix loader, the shipped NVIDIA tables).
"""
