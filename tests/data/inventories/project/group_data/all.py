ssh_user = "ops"
region = "root"
