"""Lab 09, model parallelism: what its notebook measures and says, and its quiz.

- ``mesh``: tensor parallelism's split MLP against the whole one; a 2 x 2 mesh of data and tensor groups on a preset's
  fast and slow links, both mappings predicted and measured on emulated links, and the mesh at Llama 3 70B's size
  (exercise: :func:`~.mesh.check_mesh_groups`);
- ``experts``: a mixture-of-experts layer's load, its padded all-to-all and what a fixed capacity would send, and a
  drawn router's count table (exercise: :func:`~.experts.check_padded_bytes`);
- ``attention``: ring attention against full attention (exercise: :func:`~.attention.check_merge`);
- ``sequence``: Megatron's sequence parallelism on a whole layer against tensor parallelism on simulated ranks (bytes
  by collective, activations by part beside Korthikanti et al.'s formula), and Ulysses' two all-to-alls, their bytes
  against ring attention's;
- ``balance``: causal ring attention's work by layout (contiguous, zigzag) and the block that hides a step's transfer
  (exercise: :func:`~.balance.check_zigzag_chunks`);
- ``pipelines``: GPipe, 1F1B, interleaved and ZB-H1 timelines against their closed forms (exercise:
  :func:`~.pipelines.check_timeline_bubble`);
- ``checks``: the exercises that derive or choose a number, each checked against ringlab's own count: a micro-batch's
  tensor-group bytes over a step's data-group bytes (``group_bytes``), the smallest capacity factor that drops under 1%
  of a drawn router's tokens (``capacity_rows``), the smallest ring-attention block that hides its transfer
  (``hiding_block``);
- ``quiz``: the lab's questions.
"""
