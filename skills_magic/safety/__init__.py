"""Everything between a skill's script and the machine: the permission policy and its trust, the reviewed manifest, the gate, the sandbox, its network proxy and the changes a run leaves."""
