"""`fleet diagnose`: the first ten minutes of a slow GPU host, as pure functions.

Each bundle file (see `bundle.BUNDLE_FILES`) has a pure parser (text -> data, pyinfra's "command
plus parser" split: the command lives in `fleet.remote.bundle` and in docs/diagnose.md); the
questions in `questions` turn the parsed evidence into ordered findings and a verdict. Nothing
here reads a file, a clock or the network.

The nvidia-smi and kernel-log parsing is the project's own (`fleet.probe.hostprobe`'s pure,
stdlib-only parsers, as `fleet facts` and `fleet logs` use them): one field mapping and one
Xid/AER reading for the probe, the imports and the diagnosis.
"""
