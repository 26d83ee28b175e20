"""Pure parsers of `nvidia-smi` output captured elsewhere: the `-q` text and the `--query-gpu`
CSV. They sit in the domain so both the diagnosis (`fleet.domain.diagnose`) and the facts import
(`fleet.facts`) take them from below; the XML parser is the probe's own."""
