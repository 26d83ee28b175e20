"""`fleet matrix ...`: placeholder until the matrix commands land."""

import typer

app = typer.Typer(help="Validate, show and compare version matrices.", no_args_is_help=True)
