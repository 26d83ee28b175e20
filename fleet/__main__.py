from fleet.cli.app import run

run()
