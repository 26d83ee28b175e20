from os import sep  # noqa: F401 (imported names are not group data)

region = "inventory"
