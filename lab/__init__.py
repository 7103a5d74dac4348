"""The attack and measurement harness that tests/ and benchmarks/ share (importable as `lab.*` from the repository
root; tests/conftest.py and the benchmarks put the root on sys.path). Not part of the installed package.

    families      every registered family's bundled pair (fixtures/...) and synthesized pairs of any seed
    demo          writable copies of the Qwen3.5 demo pair (fixtures/qwen3_5), patched or sharded variants
    dirsnap       snapshots of a directory tree (content, modes, links) and injected filesystem faults
    procs         child processes holding the directory lock or killed mid-commit
    kills         the kill lab: `patch` stopped before each numbered filesystem write, and the rules of the aftermath
    fuzz          seeded mutators of every input kind of every family, and how an outcome is judged
    hostile_forms every hostile form of every input file of every family (FIFOs, sparse files, deep JSON, ...)
    hostile       running those forms through every command reading them, in a bounded child process
    hub, hub_server  a Hugging Face cache snapshot layout, and a Hub look-alike on 127.0.0.1
    attack_links  link, leftover-journal and concurrent-writer attacks on real CLI runs, judged (bench_reliability)
    bandwidth_floor  the bytes a head's weight MatMuls read, and a BLAS pass over as many (bench_head_latency)
    trace_phases  the real CLI run with wall-clock spans around the house's functions (profile_patch runs it)
    bench_runs    a command timed as a child process with its peak memory; patch-vs-export cost rounds, their options
                  and sizes loop (bench_dflash, bench_eagle3, bench_tune)
    spec_grid     plain generation and every (draft format, K) in alternating rounds (bench_tune)
    perf_pair     the dflash-cycle pair with a wider, deeper target: bench_tune's performance fixture
"""
