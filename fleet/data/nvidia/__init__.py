"""NVIDIA compatibility tables shipped as data (read by `fleet.domain.nvidia_data`)."""
