"""The typer command line: thin, it parses flags, calls jobs and domain code, and prints."""
