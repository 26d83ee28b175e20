gpu_model = "H100-root"
bake_minutes = 5
