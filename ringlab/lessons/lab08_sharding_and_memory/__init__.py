"""Lab 08, beyond data parallelism: what its notebook measures and says, and its quiz.

- ``sharding``: what plain data parallelism and each ZeRO stage hold and send, measured on emulated links, the
  paper's formulas and 8 and 16 H100s (exercise: :func:`~.sharding.check_zero_bytes`);
- ``mesh``: a 2 x 2 mesh of data and tensor groups on a preset's fast and slow links, both mappings predicted
  and measured on emulated links (exercise: :func:`~.mesh.check_mesh_groups`);
- ``experts``: a mixture-of-experts layer's load and its padded all-to-all (exercise: :func:`~.experts.check_padded_bytes`);
- ``attention``: ring attention against full attention (exercise: :func:`~.attention.check_merge`);
- ``nccl``: how NCCL picks algorithm and protocol, held against published sweeps; PAT (exercise:
  :func:`~.nccl.check_fastest_protocol`);
- ``symmetric``: one-shot and two-shot allreduce (symmetric memory) measured against the ring and MPI's own on this
  machine, counted from their schedules, and predicted by NCCL's model of its symmetric kernels;
- ``quiz``: the lab's questions.
"""
