"""The ``ringlab`` command (also ``python -m ringlab``)."""
from __future__ import annotations

import argparse
import sys

from .algorithms import ALGORITHMS, about, build, options_of
from .measure.units import parse_size
from .cluster.launch import RANKS_PER_CORE

DEMO_MAX_RANKS = 32  # the walk-through grows as ranks x chunks x steps: past this it is unreadable


def _algorithm_help() -> str:
    lines = ["algorithms (options in brackets):"]
    for name in sorted(ALGORITHMS):
        doc = about(name).split(". ")[0].split("\n")[0]
        opts = ", ".join(options_of(name))
        lines.append(f"  {name:<20} {('[' + opts + '] ') if opts else ''}{doc}")
    return "\n".join(lines)


def _size(text: str) -> int:
    try:
        return parse_size(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="ringlab", description="ringlab: collective communication from scratch.")
    commands = top.add_subparsers(dest="command", required=True, metavar="COMMAND")
    demo = commands.add_parser(
        "demo", help="walk through one collective, step by step, in the terminal",
        description="Print every step of a collective: who sends which chunk to whom, what every rank "
                    "holds afterwards (r0+r1+r2 = the sum of those ranks' inputs), then the bytes each "
                    "rank sends and receives.",
        epilog=_algorithm_help() + "\n\nexamples:\n  ringlab demo --algorithm allreduce.ring -n 4\n"
               "  ringlab demo -a allreduce.dbtree -n 6 --segments 2\n"
               "  ringlab demo -a allreduce.hierarchical -n 4 --local 2\n"
               "  ringlab demo -a alltoall.pairwise -n 3",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    demo.add_argument("-a", "--algorithm", default="allreduce.ring", metavar="NAME",
                      help="a registered algorithm, listed below (default: allreduce.ring)")
    demo.add_argument("-n", "--nranks", type=int, default=4,
                      help=f"number of ranks, 1 to {DEMO_MAX_RANKS} (default: 4)")
    demo.add_argument("--root", type=int, help="root rank, for algorithms that have one (default: 0)")
    demo.add_argument("--segments", type=int,
                      help="pipeline segments, for the chain algorithms and allreduce.dbtree (default: the builder's)")
    demo.add_argument("--servers", type=int, help="parameter-server shards M, for allreduce.ps (default: 1)")
    demo.add_argument("--rings", type=int, help="rings (NCCL's channels) k, for allreduce.rings (default: 2)")
    demo.add_argument("--local", type=int, help="ranks per node L, for allreduce.hierarchical")
    demo.add_argument("-b", "--bytes", type=_size, default="1M", dest="nbytes",
                      help="buffer size per rank for the traffic table, e.g. 4K, 64M (default: 1M)")
    predict = commands.add_parser(
        "predict", help="predict times with the alpha-beta cost model on topology presets",
        description="Predicted, not measured: the cost model on topologies built from published figures "
                    "(latencies assumed). By default one row per preset and algorithm.",
        epilog="presets: " + ", ".join(_presets()) + "\n\nexamples:\n"
               "  ringlab predict -a allreduce.ring,allreduce.tree -b 64M\n"
               "  ringlab predict -t hgx-h100-8 -a allreduce.ring -b 1M --protocol auto\n"
               "  ringlab predict -t dgx1-v100 -a allreduce.ring --steps\n"
               "  ringlab predict -t dgx1-v100 --crossover allreduce.tree,allreduce.ring\n"
               "  ringlab predict -t dgx1-p100 --rings",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    predict.add_argument("-t", "--topology", default="all", help="a preset, or 'all' (default)")
    predict.add_argument("-a", "--algorithm", default="allreduce.ring,allreduce.tree",
                         help="comma-separated algorithm names (default: allreduce.ring,allreduce.tree)")
    predict.add_argument("-b", "--bytes", type=_size, default="64M", dest="nbytes", help="buffer per rank (default 64M)")
    predict.add_argument("--protocol", choices=["LL", "LL128", "Simple", "auto"],
                         help="add NCCL's costs of this protocol (its latency per call and per step, its share of "
                              "the link); auto: the fastest NCCL would use here (default: the bare alpha-beta model)")
    predict.add_argument("--steps", action="store_true", help="per-step breakdown (one topology, one algorithm)")
    predict.add_argument("--crossover", metavar="A,B", help="the size above which B is predicted faster than A")
    predict.add_argument("--rings", action="store_true", help="the best ring order against the plain 0..n-1")
    bench = commands.add_parser(
        "bench", help="time collectives over message sizes, like nccl-tests, checking every result",
        description="Measured here: each size's median time, algbw and busbw (nccl-tests' factors: allreduce "
                    "2(n-1)/n, reduce-scatter and allgather (n-1)/n, reduce and broadcast 1), with every result "
                    "checked against MPI's own collective. Runs inside an MPI job, or starts one with -n.",
        epilog="implementations (-a): ringlab's algorithm names for the collective (ring, tree, chain, rhd, ps, "
               "naive, direct), mpi (MPI's own), nccl (two GPUs or more), torch (torch.distributed)\n\n"
               "examples:\n  ringlab bench -n 4 -b 8 -e 64M -f 4 -a ring,rhd,mpi\n"
               "  ringlab bench -n 3 -c broadcast -a chain,tree,mpi --root 1 --json bcast.json",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    bench.add_argument("-n", "--nranks", type=int,
                       help="start mpiexec with this many ranks (more than the cores: a warning; more than "
                            f"{RANKS_PER_CORE} a core: refused)")
    bench.add_argument("-c", "--collective", default="allreduce", help="allreduce (default), reduce, broadcast, "
                                                                          "reduce_scatter, allgather")
    bench.add_argument("-a", "--algorithms", default="ring,mpi", help="comma-separated (default: ring,mpi)")
    bench.add_argument("-b", "--minbytes", type=_size, default="8", help="smallest size (default 8)")
    bench.add_argument("-e", "--maxbytes", type=_size, default="32M", help="largest size (default 32M)")
    bench.add_argument("-f", "--stepfactor", type=int, help="multiply the size by this (default 2)")
    bench.add_argument("-i", "--stepbytes", type=_size, help="or add this many bytes")
    bench.add_argument("-d", "--datatype", default="float32",
                       help="float16, bfloat16, float32 (default), float64, int32, int64")
    bench.add_argument("-o", "--op", default="sum",
                       help="the reduction of allreduce, reduce and reduce_scatter: sum (default), prod, max, min, avg "
                            "(NCCL's operators; MPI has no avg: its row is MPI's sum divided by the ranks)")
    bench.add_argument("--iters", type=int, default=20, help="timed iterations per size, at least 1 (default 20)")
    bench.add_argument("-w", "--warmup", type=int, default=5, help="untimed iterations first (default 5)")
    bench.add_argument("--root", type=int, default=0, help="root of reduce and broadcast (default 0)")
    bench.add_argument("--gpu", action="store_true", help="cupy buffers, one GPU per rank (shared if fewer)")
    bench.add_argument("--transport", default="auto", help="with --gpu: auto, host, cuda-aware, ipc")
    bench.add_argument("--json", metavar="FILE", help="write the results and the machine's description")
    bench.add_argument("--inplace", action="store_true",
                       help="also time each implementation in place (its result overwriting its input), beside the "
                            "out-of-place figures, as nccl-tests prints both (torch and NCCL: out of place only)")
    bench.add_argument("--emulate", metavar="SPEC",
                       help="run ringlab's algorithms on an emulated machine's links: a preset name (ringlab predict "
                            "--help lists them), uniform:GBPS:US, or nodes:RANKS:GBPS:US (nodes of RANKS ranks, free "
                            "inside, a port of GBPS a rank between them), optionally @SCALE (how many times slower); "
                            "e.g. uniform:0.1:100, nodes:2:0.5:20 or hgx-h100-8. Timed in virtual time: each "
                            "message takes its links' time, nobody sleeps, and this machine's wall time is printed "
                            "beside. MPI's own collective (mpi) is not emulated")
    bench.add_argument("--emulate-compute", choices=("cpu", "model"), default=None,
                       help="with --emulate: how a call's own work (its reductions) counts on the virtual clock: cpu "
                            "(the CPU time it took here; the default, or RINGLAB_EMULATE_COMPUTE) or model (its bytes "
                            "at the emulated machine's reduce rate, as the cost model prices it: this CPU never "
                            "counts, so the times hold on a busy machine)")
    bandwidth = commands.add_parser(
        "bandwidth", help="measure link bandwidth and latency, next to each link's theoretical peak",
        description="Measured here. Without GPUs: the memory copy rate, and MPI ping-pong between two ranks "
                    "(give -n 2). With GPUs: host<->device pinned and pageable, one way and both ways, device "
                    "copies, and the peer-to-peer matrix with peer access on and off.")
    bandwidth.add_argument("-n", "--nranks", type=int, help="start mpiexec with this many ranks (2 for ping-pong)")
    bandwidth.add_argument("--sizes", default="8,64,1K,16K,256K,4M,64M", help="ping-pong sizes, comma-separated")
    bandwidth.add_argument("--gpu-bytes", type=_size, default="256M",
                           help="size of each GPU copy (default 256M, as large as CUDA's samples use)")
    bandwidth.add_argument("--json", metavar="FILE", help="write the results and the machine's description")
    commands.add_parser("doctor", help="what this machine has (MPI, GPUs, links, torch, NCCL) and what each lab "
                                       "will do here")
    read = commands.add_parser(
        "import", help="read logs of the standard NVIDIA tools (nccl-tests, p2pBandwidthLatencyTest, "
                       "bandwidthTest, nvbandwidth) into ringlab's JSON",
        description="Reads each LOG, detects its format, prints its table and, with --json, writes ringlab's "
                    "JSON. nccl-tests (*_perf output, mpirun's rank prefixes included): rows with bytes, count, "
                    "dtype, time_s, algbw_Bps, busbw_Bps, wrong and the in-place columns, as `ringlab bench "
                    "--json` writes them. p2pBandwidthLatencyTest: the bandwidth (GB/s) and latency (us) "
                    "matrices with P2P off and on, row = source GPU. bandwidthTest: host<->device and device "
                    "copies, pinned and pageable. nvbandwidth, text or JSON (-j): each test case's matrix (GB/s).",
        epilog="example:\n  ringlab import all_reduce_perf.log --json h100.json",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    read.add_argument("logs", nargs="+", metavar="LOG", help="a tool's output, saved to a file")
    read.add_argument("--collective", help="for nccl-tests logs that do not name it (nccl-tests before 2.14, or an "
                      "excerpt without its header): allreduce, allgather, ...; for a file of several runs, one each "
                      "in order: allgather,allreduce")
    read.add_argument("--json", metavar="OUT", help="write what was read (one object, or a list for several logs)")
    explain = commands.add_parser(
        "explain", help="is my number normal? an nccl-tests sweep against healthy hardware of its kind, and why not",
        description="Reads each LOG (nccl-tests output, `ringlab import --json` or `ringlab bench --json` output, or "
                    "a published sweep of ringlab's data set), finds the machine it ran on from its GPUs and hosts "
                    "(or takes --machine), and prints size by size the measured busbw, what NCCL's own model "
                    "predicts for healthy hardware of that kind, measured / expected, and the nearest published "
                    "sweep of a healthy machine like it. Where the sweep is well below, it names the causes whose "
                    "machine the measurement matches: rails not used (one NIC's worth), the rails at a quarter of "
                    "their rate (GPUDirect RDMA off, ACS, the IOMMU), NVLS off, P2P off on a PCIe box, a lower PCIe "
                    "generation. Where a healthy sweep's smaller sizes fall short, a note says which and what to "
                    "look at. Expected figures are predictions, published ones are labelled; only your log is a "
                    "measurement.",
        epilog="machines (--machine): a preset (" + ", ".join(_presets()) + "), or GPU:NODESxGPUS with options, "
               "GPU any that rl.topology.cluster knows (" + ", ".join(_gpus()) + "), e.g. h100:2x8, "
               "a100:16x8:nic=200, h100:4x8:nics=4:fabric=roce, b200:1x8:nvls=off, "
               "b200:1x8:fabric=efa (an AWS node: NCCL runs with the parameters AWS's EFA plugin sets), mi300x:1x8 "
               "(RCCL's model), gh200:4x4:fabric=slingshot:nic=200, rtx4090:1x8:p2p=off, rtx5090:1x4:pcie=4"
               "\n\nexamples:\n"
               "  ringlab explain all_reduce_perf.log\n"
               "  ringlab explain all_reduce_perf.log --machine h100:2x8 --json verdict.json\n"
               "  ringlab explain ringlab/data/published/A03_nccltests290_h100_2x8_ib_ndr_allreduce_ring.json",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    explain.add_argument("logs", nargs="+", metavar="LOG", help="an nccl-tests log, or ringlab's JSON of one")
    explain.add_argument("--machine", metavar="SPEC", help="the machine it ran on (default: read from the log)")
    explain.add_argument("--collective", help="for nccl-tests logs that do not name it (nccl-tests before 2.14, or an "
                         "excerpt without its header); for a file of several runs, one each in order: A,B")
    explain.add_argument("--json", metavar="OUT", help="write rows (bytes, measured_busbw, expected_busbw, ratio), "
                                                        "verdict, causes and notes (one object, or a list for "
                                                        "several logs)")
    from .train.planner import ATTENTION, CROSS_ENTROPY_TRAFFIC, SCHEDULES
    plan = commands.add_parser(
        "plan", help="plan a training run: memory per GPU, step time by kind, every collective (predicted)",
        description="Predicted, not measured: a transformer's training step on a machine of GPUs laid out as "
                    "tensor (tp), pipeline (pp), context (cp), expert (ep) and data parallelism (the rest), from the "
                    "model's shape, the GPU's published peak and matmul rate, and NCCL's cost model for every "
                    "collective. Prints memory per GPU by kind against the GPU's, the step's time by kind, and the "
                    "collectives; --search ranks every layout instead.",
        epilog="models: " + ", ".join(_models()) + ", or --shape LAYERS,HIDDEN,HEADS,FFN,VOCAB[,KV_HEADS]"
               "\n\nexamples:\n"
               "  ringlab plan llama3-70b --gpus 256 --gpu h100 --tp 8 --pp 4 --global-batch 512 --seq 8192\n"
               "  ringlab plan llama3-70b --gpus 256 --gpu h100 --global-batch 512 --seq 8192 --search\n"
               "  ringlab plan llama3.1-405b --gpus 16384 --gpu h100 --tp 8 --pp 16 --vp 8 --ends-in-pipeline-split "
               "--zero 2 --global-batch 2048 --seq 8192 --json plan.json   # the Llama 3 paper's layout",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    plan.add_argument("model", nargs="?", help="a preset model (below); or give --shape")
    plan.add_argument("--shape", metavar="L,H,A,F,V[,KV]", help="layers, hidden, heads, ffn, vocab[, kv heads] of a "
                                                                "gated (Llama-like) model")
    plan.add_argument("--gpus", type=int, required=True, help="GPUs in all")
    plan.add_argument("--gpu", default="h100", help="the GPU (default h100): " + ", ".join(_gpus()))
    plan.add_argument("--gpus-per-node", type=int, default=8, help="GPUs a node, one NVLink domain (default 8)")
    plan.add_argument("--nic-gbps", type=float, default=400, help="each NIC's Gbit/s, one NIC a GPU (default 400)")
    plan.add_argument("--fabric", default="ib", help="the network between nodes: ib, roce, efa, slingshot (default ib)")
    for key, what in (("tp", "tensor-parallel ranks (inside a node first)"), ("pp", "pipeline stages"),
                      ("cp", "context-parallel ranks"), ("ep", "expert-parallel ranks"),
                      ("vp", "virtual stages a pipeline stage (interleaved 1F1B)")):
        plan.add_argument(f"--{key}", type=int, help=f"{what} (default 1; with --search: held fixed)")
    plan.add_argument("--zero", type=int, choices=[0, 1, 2, 3], help="ZeRO stage: 1 shards the optimizer, 2 also "
                                                                    "gradients, 3 also weights (FSDP) (default 0)")
    plan.add_argument("--micro-batch", type=int, help="sequences a micro-batch (default 1)")
    plan.add_argument("--global-batch", type=int, required=True, help="sequences a step")
    plan.add_argument("--seq", type=int, required=True, help="tokens a sequence")
    plan.add_argument("--precision", default="bf16", choices=["bf16", "fp16", "fp8"], help="matmul precision")
    plan.add_argument("--recompute", choices=["none", "selective", "full"], help="activation recomputation")
    plan.add_argument("--schedule", choices=list(SCHEDULES), help="the pipeline's schedule (default 1f1b; "
                      "interleaved when --vp is over 1)")
    plan.add_argument("--attention", choices=list(ATTENTION), help="flash (the default: FlashAttention at the fastest "
                      "kernel published for the GPU, cuDNN's on Hopper and Blackwell), fa2 (at FlashAttention-2's own "
                      "published rates), fa1 (at FlashAttention's, v1: for its era's kernels and its Triton port) or "
                      "unfused (the scores through memory, as before 2022)")
    plan.add_argument("--cross-entropy", choices=list(CROSS_ENTROPY_TRAFFIC),
                      help="the loss's implementation: " + ", ".join(f"{k} ({v} bytes a logit)" for k, v in
                                                                   CROSS_ENTROPY_TRAFFIC.items())
                      + " (default unfused, Megatron-LM's)")
    plan.add_argument("--cp-comm", choices=["p2p", "all_gather"],
                      help="how context parallelism moves keys and values: p2p (the default, Megatron-Core's ring, "
                           "hidden behind attention) or all_gather (gathered before attention runs, exposed: the "
                           "Llama 3 paper's)")
    plan.add_argument("--ends-in-pipeline-split", action="store_true",
                      help="count the embedding and the loss as a layer each when layers are split into pipeline "
                           "stages (Megatron-Core's account_for_embedding_in_pipeline_split and ..._loss_...; the "
                           "Llama 3 paper's balancing)")
    plan.add_argument("--grad-reduce-in-bf16", action="store_true",
                      help="keep and reduce gradients in the weights' 16 bits, not fp32 (Megatron-LM's "
                           "--grad-reduce-in-bf16; grad_reduce_in_fp32=False)")
    plan.add_argument("--precision-aware-optimizer", action="store_true",
                      help="Megatron-Core's precision-aware optimizer (reads the 16-bit gradients in place)")
    plan.add_argument("--optimizer-dtype", choices=["fp32", "bf16"],
                      help="Adam's state: fp32 (the default: fp32 master weights and moments, 12 bytes a parameter) "
                           "or bf16 (bf16 moments and no master copy, 4 bytes: NeMo's Apex optimizer with dtype bf16)")
    plan.add_argument("--offload-layers", type=int, metavar="N",
                      help="N layers' activations kept in host memory (Megatron-Core's cpu_offloading_num_layers; "
                           "needs --pp 1)")
    plan.add_argument("--search", action="store_true", help="rank every layout (the options given are held fixed)")
    plan.add_argument("--top", type=int, default=10, help="plans --search prints (default 10)")
    plan.add_argument("--json", metavar="OUT", help="write the plan (or the ranked plans) as JSON")
    from .cluster import command as cluster
    cluster.add_parser(commands)
    return top


def _models() -> list[str]:
    from .train.transformer import PRESETS
    return list(PRESETS)


def _given(layout: dict) -> str:
    return " ".join(f"--{k.replace('_', '-')} {v}" for k, v in layout.items())


def _plan(args) -> int:
    import json

    from .topology.machines import cluster
    from .train.planner import plan, search
    from .train.transformer import Transformer

    if args.shape:
        try:
            numbers = [int(x) for x in args.shape.split(",")]
        except ValueError:
            raise ValueError(f"--shape takes whole numbers L,H,A,F,V[,KV], got {args.shape!r}") from None
        if len(numbers) not in (5, 6):
            raise ValueError(f"--shape takes 5 or 6 numbers (layers, hidden, heads, ffn, vocab[, kv heads]), "
                             f"got {len(numbers)}")
        model = Transformer(*numbers[:5], kv_heads=numbers[5] if len(numbers) == 6 else None, name=args.shape)
    elif args.model:
        model = Transformer.preset(args.model)
    else:
        raise ValueError("give a model (a preset's name) or --shape")
    if args.gpus < 1 or args.gpus_per_node < 1:
        raise ValueError(f"--gpus and --gpus-per-node must be at least 1, got {args.gpus} and {args.gpus_per_node}")
    if args.top < 1:  # a slice by 0 or -1 would print none or all but the last
        raise ValueError(f"--top must be at least 1, got {args.top}")
    per_node = min(args.gpus, args.gpus_per_node)
    if args.gpus % per_node:
        raise ValueError(f"--gpus {args.gpus} is not a whole number of nodes of {per_node} GPUs")
    topology = cluster(args.gpu, args.gpus // per_node, per_node, nic_gbps=args.nic_gbps, fabric=args.fabric)
    layout = {k: getattr(args, k) for k in ("tp", "pp", "cp", "ep", "vp", "zero", "micro_batch")
              if getattr(args, k) is not None}
    if args.recompute:
        layout["recompute"] = None if args.recompute == "none" else args.recompute
    common = {"global_batch": args.global_batch, "seq": args.seq, "precision": args.precision}
    common.update({k: getattr(args, k) for k in ("schedule", "attention", "cross_entropy", "cp_comm")
                   if getattr(args, k) is not None})
    common.update({k: True for k in ("ends_in_pipeline_split", "precision_aware_optimizer") if getattr(args, k)})
    if args.grad_reduce_in_bf16:
        common["grad_reduce_in_fp32"] = False
    if args.optimizer_dtype:
        common["optimizer_dtype"] = args.optimizer_dtype
    if args.offload_layers is not None:
        common["offload_layers"] = args.offload_layers
    if args.search:
        found = search(model, topology, **common, **layout)
        print(found.table(args.top))
        if args.json:
            out = {"considered": found.considered,
                   "plans": [dict(p.to_dict(), why=None if i == 0 else found.why_slower(p))  # why it loses to the best
                             for i, p in enumerate(found.best[:args.top])],
                   "rejected": [{"layout": lay, "why": why} for lay, why in found.rejected]}
            with open(args.json, "w") as f:
                json.dump(out, f, indent=1)
        return 0 if found.best else 1
    result = plan(model, topology, **common, **layout)
    print(result.table())
    if not result.fits:
        print(f"\nIt does not fit. To rank the layouts that do: the same command with --search "
              f"(what you gave, {_given(layout) or 'no layout'}, is held fixed there).")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result.to_dict(), f, indent=1)
    return 0


def _import(args) -> int:
    from .measure.logs import read_logs, read_text_file
    from .measure.machine import save_json

    results = []
    for path in args.logs:
        text = read_text_file(path)  # a FIFO, a device or a huge file is refused, not read forever
        try:
            found = read_logs(text, collective=args.collective)
        except ValueError as err:
            raise ValueError(f"{path}: {err}") from None
        for i, result in enumerate(found):
            result["file"] = path if len(found) == 1 else f"{path} (run {i + 1} of {len(found)})"
            results.append(result)
            _print_import(result)
    if args.json:
        save_json(args.json, results[0] if len(results) == 1 else results)
        print(f"# wrote {args.json}")
    return 0


def _explain(args) -> int:
    import json

    from .measure.explain import describe, explain, read_all

    answers, failed = [], []
    for path in args.logs:
        try:
            found = read_all(path, args.collective)
        except ValueError as err:
            raise ValueError(f"{path}: {err}") from None
        for result, name, label in found:
            try:
                answer = explain(result, args.machine, name)
            except ValueError as err:
                if len(found) == 1 and len(args.logs) == 1:
                    raise ValueError(f"{label}: {err}") from None
                failed.append(label)  # the other runs of the file are still explained
                print(f"ringlab explain: error: {label}: {err}", file=sys.stderr)
                continue
            answers.append(dict(answer, file=label))
            _quietly(lambda: print("\n".join(describe(answer, label))))
    if args.json and answers:
        with open(args.json, "w") as fh:
            json.dump(answers[0] if len(answers) == 1 else answers, fh, indent=1)
        print(f"# wrote {args.json}")
    if failed:
        print(f"ringlab explain: {len(failed)} of {len(failed) + len(answers)} sweeps not explained (said above: "
              f"{'; '.join(failed)})", file=sys.stderr)
        return 2
    return 0


def _print_import(result: dict) -> None:
    """What was read, as a table: nccl-tests' rows, p2pBandwidthLatencyTest's matrices, bandwidthTest's rows."""
    names = sorted({d["name"] for d in result.get("devices", [])})
    where = f" ({', '.join(names)})" if names else ""
    if result["format"] == "nccl-tests":
        said = {"given": "as given", "program line": "its program line", "command line": "the command that ran it",
                "columns": "its columns: no other collective fits them"}.get(result.get("collective_from"))
        tool = result.get("tool", "nccl-tests")
        library = "RCCL" if tool == "rccl-tests" else "NCCL"
        print(f"# {result['file']}: {tool}, {result['collective']} on {result['ranks'] or '?'} ranks{where}"
              + (f", {library} {result['nccl_version']}" if result["nccl_version"] else ""))
        if said or result.get("ranks_from") or result.get("layout"):
            print(f"#   the collective from {said or '?'}; the ranks from "
                  f"{result.get('ranks_from') or 'nothing in the log (give --machine to explain)'}; "
                  f"table layout: {result.get('layout', '?')}")
        for note in result.get("notes", []):
            print(f"#   note: {note}")
        print(f"# {'size (B)':>12} {'time (us)':>10} {'algbw':>8} {'busbw':>8} {'#wrong':>6}   in place: "
              f"{'time (us)':>10} {'busbw':>8}   (GB/s)")

        def cell(value, scale, width):
            return f"{'-':>{width}}" if value is None else f"{value * scale:>{width}.2f}"
        for row in result["rows"]:
            wrong = "N/A" if row["wrong"] is None else str(row["wrong"])
            print(f"  {row['bytes']:>12} {cell(row['time_s'], 1e6, 10)} {cell(row['algbw_Bps'], 1e-9, 8)} "
                  f"{cell(row['busbw_Bps'], 1e-9, 8)} {wrong:>6}             {cell(row['inplace_time_s'], 1e6, 10)} "
                  f"{cell(row['inplace_busbw_Bps'], 1e-9, 8)}")
        if result["avg_busbw_Bps"] is not None:
            print(f"# average bus bandwidth, as the log says: {result['avg_busbw_Bps'] / 1e9:.3f} GB/s")
        for row in result.get("left_out", []):
            print(f"ringlab import: {result['file']}, line {row['line']}: a result row cut short or garbled, left "
                  f"out: {row['text']!r}", file=sys.stderr)
    elif result["format"] == "p2pBandwidthLatencyTest":
        print(f"# {result['file']}: p2pBandwidthLatencyTest on {len(result['devices']) or '?'} GPUs{where}, "
              f"P2P {result['p2p_method']}")
        for name, matrix in result["matrices"].items():
            unit = "1 = P2P possible" if name == "connectivity" else "us" if name.startswith("latency") else "GB/s"
            print(f"# {name} ({unit}), row = source GPU")
            for i, row in enumerate(matrix):
                print(f"  gpu{i:<3}" + "".join(f"{v:>9.2f}" for v in row))
    elif result["format"] == "nvbandwidth":
        print(f"# {result['file']}: nvbandwidth {result['version'] or ''} on {len(result['devices']) or '?'} GPUs"
              f"{where}, driver {result['driver'] or '?'}")
        for name, case in result["testcases"].items():
            if not case["matrix"]:
                print(f"# {name}: {case['status']}")
                continue
            print(f"# {name}: {case['description']}")
            for i, row in enumerate(case["matrix"]):
                print(f"  {i:<4}" + "".join(f"{'N/A':>9}" if v is None else f"{v:>9.2f}" for v in row))
    else:
        print(f"# {result['file']}: bandwidthTest{where}, {result['mode'] or '?'} mode")
        print(f"# {'direction':<17} {'memory':<9} {'size (B)':>12} {'GB/s':>9}")
        for row in result["rows"]:
            print(f"  {row['direction']:<17} {row['memory'] or '?':<9} {row['bytes']:>12} {row['Bps'] / 1e9:>9.2f}")


def _bandwidth(args, argv) -> int:
    from mpi4py import MPI

    from .measure.bandwidth import cpu_report, gpu_report
    from .measure.bench import in_mpi_job
    from .measure.machine import SCHEMA, describe_machine, save_json
    from .measure.units import parse_size
    from .mpi.devices import cupy_module
    from .cluster.launch import relaunch

    sizes = [parse_size(s) for s in args.sizes.split(",") if s.strip()]
    if not sizes:
        raise ValueError(f"--sizes lists no size ({args.sizes!r}): give them comma-separated, like 8,64,1K,4M")
    if args.nranks is not None and not in_mpi_job():
        check_nranks(args.nranks)
        return relaunch(args.nranks, argv, ["-m", "ringlab"])
    comm = MPI.COMM_WORLD
    result = {"kind": "ringlab-bandwidth", "schema": SCHEMA, "cpu": cpu_report(comm, sizes, sys.stdout)}
    if cupy_module() is not None and comm.Get_rank() == 0:
        result["gpu"] = gpu_report(sys.stdout, args.gpu_bytes)
    if comm.Get_rank() == 0 and args.json:
        result["machine"] = describe_machine(["ringlab", *argv])
        save_json(args.json, result)
        print(f"# wrote {args.json}")
    return 0


def _bench(args, argv) -> int:
    from .measure.bench import check_arguments, in_mpi_job, run, sweep
    from .cluster.launch import relaunch

    algorithms = [a for a in args.algorithms.split(",") if a]
    factor = args.stepfactor if args.stepfactor is not None or args.stepbytes is not None else 2
    sizes = sweep(args.minbytes, args.maxbytes, factor=factor, increment=args.stepbytes)
    if args.nranks is not None and not in_mpi_job():  # every mistake said once, here, before a job starts
        check_nranks(args.nranks)
        check_arguments(args.collective, algorithms, args.datatype, args.iters, args.warmup, args.root, args.nranks,
                        args.json, sizes=sizes, gpu=args.gpu, emulate=args.emulate, op=args.op,
                        emulate_compute=args.emulate_compute)
        return relaunch(args.nranks, argv, ["-m", "ringlab"])
    run(args.collective, algorithms, sizes, args.datatype, args.iters,
        args.warmup, args.root, args.gpu, args.transport, args.json, command=["ringlab", *argv],
        emulate=args.emulate, inplace=args.inplace, op=args.op, emulate_compute=args.emulate_compute)
    return 0


def check_nranks(nranks) -> None:
    from .cluster.launch import check_nranks as check

    check(nranks)


def _gpus() -> list[str]:
    from .topology import GPUS

    return list(GPUS)


def _presets() -> list[str]:
    from .topology import preset_names
    return preset_names()


def _two_names(text: str) -> tuple[str, str]:
    names = [n for n in text.split(",") if n]
    if len(names) != 2:
        raise ValueError(f"--crossover takes two algorithms, A,B (e.g. allreduce.tree,allreduce.ring), got {text!r}")
    return names[0], names[1]


def _predict(args) -> None:
    from .predict.costmodel import crossover, predict, whatif
    from .predict.rings import ring_report
    from .topology import preset
    from .measure.units import format_bytes

    if args.nbytes < 1:
        raise ValueError(f"-b must be at least 1 byte, got {args.nbytes}")
    pair = _two_names(args.crossover) if args.crossover else None
    if args.steps and (args.topology == "all" or "," in args.algorithm):
        raise ValueError("--steps shows one algorithm on one topology: give -t PRESET and one -a NAME")
    names = _presets() if args.topology == "all" else [args.topology]
    topologies = [preset(name) for name in names]
    algorithms = [a for a in args.algorithm.split(",") if a]
    how = f"NCCL's {args.protocol} protocol costs" if args.protocol else "latencies assumed"
    print(f"# predicted by the cost model (not measured); {topologies[0].source if len(names) == 1 else 'published figures'}; "
          + how)
    if pair:
        first, second = pair
        for topo in topologies:
            size = crossover(first, second, topo, protocol=args.protocol)
            said = "never, up to 16 GiB" if size is None else f"from {format_bytes(size)} up"
            print(f"  {topo.name:<18} {second} beats {first}: {said}")
    elif args.rings:
        for topo in topologies:
            r = ring_report(topo, args.nbytes)
            print(f"  {topo.name:<18} best ring {r['best_order']}: plain 0..n-1 is {r['slowdown_of_plain']:.2f}x slower "
                  f"for allreduce.ring of {format_bytes(args.nbytes)}")
    elif args.steps:
        p = predict(build(algorithms[0], topologies[0].nranks), args.nbytes, topologies[0], protocol=args.protocol)
        print(f"  {'step':>4} {'latency us':>11} {'transfer us':>12} {'reduce us':>10}  bottleneck")
        for i, row in enumerate(p.steps):
            print(f"  {i:>4} {row['latency'] * 1e6:>11.2f} {row['transfer'] * 1e6:>12.2f} {row['reduce'] * 1e6:>10.2f}"
                  f"  {p.bottleneck_link(i)}")
        per_call = f" ({p.protocol}: {p.overhead * 1e6:.1f} us per call included)" if p.protocol else ""
        print(f"  total {p.seconds * 1e6:.1f} us{per_call}")
    else:
        print(f"  {'topology':<22} {'ranks':>5} {'algorithm':<18} {'time (us)':>11} {'busbw (GB/s)':>13}  "
              + ("protocol  " if args.protocol else "") + "bottleneck")
        for row in whatif(algorithms, args.nbytes, topologies, protocol=args.protocol):
            protocol = f"{row['protocol']:<8}  " if args.protocol else ""
            print(f"  {row['topology']:<22} {row['nranks']:>5} {row['algorithm']:<18} {row['seconds'] * 1e6:>11.1f} "
                  f"{row['busbw'] / 1e9:>13.2f}  {protocol}{row['bottleneck']}")


def main(argv: list[str] | None = None) -> int:
    top = parser()
    argv = sys.argv[1:] if argv is None else argv
    args = top.parse_args(argv)
    if args.command == "demo":
        from .viz.terminal import walkthrough

        options = {k: getattr(args, k) for k in ("root", "segments", "servers", "rings", "local")
                   if getattr(args, k) is not None}
        if args.nranks > DEMO_MAX_RANKS:
            top.exit(2, f"ringlab demo: error: {args.nranks} ranks: the walk-through prints every rank's row of "
                        f"every chunk after every step, which past {DEMO_MAX_RANKS} ranks no one can read; use "
                        f"`ringlab predict` or the widgets of ringlab.viz for large rank counts\n")
        try:
            schedule = build(args.algorithm, args.nranks, **options)
        except ValueError as err:
            top.exit(2, f"ringlab demo: error: {err}\n")
        _quietly(lambda: print(walkthrough(schedule, args.nbytes)))
    elif args.command == "bench":
        try:
            return _bench(args, argv)
        except ValueError as err:
            return _error_on_rank0("ringlab bench", err)
    elif args.command == "bandwidth":
        try:
            return _bandwidth(args, argv)
        except ValueError as err:
            return _error_on_rank0("ringlab bandwidth", err)
    elif args.command == "doctor":
        from .measure.doctor import report
        _quietly(lambda: print("\n".join(report())))
    elif args.command == "import":
        try:
            return _import(args)
        except ValueError as err:
            print(f"ringlab import: error: {err}", file=sys.stderr)
            return 2
    elif args.command == "explain":
        try:
            return _explain(args)
        except ValueError as err:
            print(f"ringlab explain: error: {err}", file=sys.stderr)
            return 2
    elif args.command == "cluster":
        from .cluster.command import main as cluster
        return cluster(args, argv)
    elif args.command == "plan":
        try:
            return _plan(args)
        except ValueError as err:
            print(f"ringlab plan: error: {err}", file=sys.stderr)
            return 2
    elif args.command == "predict":
        try:
            _quietly(lambda: _predict(args))
        except ValueError as err:
            top.exit(2, f"ringlab predict: error: {err}\n")
    return 0


def _error_on_rank0(command: str, err: Exception) -> int:
    """Say ``err`` once (rank 0 of a job, or this process) and return 2. In a job, every rank raised
    the same error; the others wait (10 s at most) until rank 0 has said it, so that none ends the
    job before rank 0's message is out."""
    from .measure.bench import in_mpi_job

    if not in_mpi_job():
        print(f"{command}: error: {err}", file=sys.stderr, flush=True)
        return 2
    import time

    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    if comm.Get_rank() == 0:
        print(f"{command}: error: {err}", file=sys.stderr, flush=True)
    said, deadline = comm.Ibarrier(), time.monotonic() + 10
    while not said.Test() and time.monotonic() < deadline:
        time.sleep(0.01)
    return 2


def _quietly(show) -> None:
    """Run ``show``; stop without a traceback when the output is piped into head and closed."""
    try:
        show()
    except BrokenPipeError:
        sys.stderr.close()


if __name__ == "__main__":
    sys.exit(main())
