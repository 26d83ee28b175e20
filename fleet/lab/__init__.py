"""The lab: real sshd hosts in Linux namespaces with fake NVIDIA packages and a fake NVML.

Root only. Layers inside this package (imports point down):

    lab.py (up/down/status/inject/reset/reboot)  -> daemon.py (one supervisor process per lab)
    hosts.py (namespaces, overlay, sshd, boot)   faults.py (fault -> state keys, log lines, files)
    repo.py (fake .debs from the matrix)         base.py (cached mmdebstrap rootfs)
    nvml_build.py (compile nvml/fakenvml.c)      perf.py (benchmark + model server on the host)
    paths.py (cache and run directories)         sysutil.py (subprocess, mounts, root checks)
    slurm.py (--slurm: slurm.conf, munged, slurmctld, slurmd per host)
    hostfleet.py (the controller's fleet, runnable inside every host)
"""
