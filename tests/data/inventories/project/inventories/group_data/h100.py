gpu_count = 8
