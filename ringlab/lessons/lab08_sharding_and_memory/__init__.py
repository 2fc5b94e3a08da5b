"""Lab 08, sharding and memory: what its notebook measures and says, and its quiz.

- ``sharding``: what plain data parallelism and each ZeRO stage hold and send, measured on emulated links, the
  paper's formulas and 8 and 16 H100s;
- ``recompute``: what autograd keeps for the backward pass of a small transformer, layer by layer, without and with
  full recomputation, against Korthikanti et al.'s count, the extra forward's time, and the planner's Llama 3 70B;
- ``prefetch``: FSDP's prefetch on ZeroOptimizer at stage 3, a step with and without it on 4 ranks on an emulated
  machine with modelled compute, against a two-stream timeline priced by the cost model, and the peak of parameters
  held at once, measured from the tensors;
- ``hybrid``: hybrid sharding (FSDP's HYBRID_SHARD): ZeRO-3 inside a node, replicas across nodes, built from ringlab's
  collectives on node and replica groups and checked against data parallelism on simulated nodes, and predicted for
  Llama 3 on 4 nodes of 8 H100s against data parallelism and ZeRO-3 over every GPU;
- ``checks``: the exercises: the fewest GPUs at each stage (:func:`~.checks.check_fewest_gpus`), what stage 3 sends
  on other ranks from what it sent on four (:func:`~.checks.check_stage3_sent`);
- ``quiz``: the lab's questions.
"""
