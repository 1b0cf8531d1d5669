#!/usr/bin/env bash
# GPU tests and benchmarks in one call on a GPU machine (the device tool's working tree copy):
#   scripts/device_check.sh [quick|gb-quick|tests|tests-files|phj-passes|tests-join|tests-groupby|profile|bench|sweeps|groupby|
#                            groupby-sweeps|tpch-gb|tpch-gpu|tpch-profile|fig6|gb-profile|gb-ncu|part-profile|part-msd|cpu-joins|
#                            tests-ooc|bench-ooc|bench-mem|bench-ooc-gb|bench-ooc-sweep|bench-host|
#                            tests-multi|bench-multi|two-gpu|ring-gsm|pass2-locks|tests-dist|bench-dist|tpch-dist|shuffle-timeline|scale|nvcomp|skew|skew-nsys|item3|radix-shuffle|gb-skew|gb-planner|join-planner|auto-sweep|fuzz|fuzz-dist|dist-cli|all]
#   (default: all)
# Runs `pytest -m gpu`, then `gpujoin bench` on the GPU; JSON lines and logs go under $OUT
# (default ./device_out), and a short table is printed last.  Pure-Python test dependencies
# missing on the machine can travel as wheels in .whl/ (installed into /tmp/site).
set -uo pipefail
stage=${1:-all}
OUT=${OUT:-device_out}
mkdir -p "$OUT"
export PYTHONPATH=src PYTHONUNBUFFERED=1
# NVLink multicast stays off on shared hosts (KINDS.md), for every process and thread we start
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
# .whl-gpu/: the larger wheels that do not fit one call beside .whl/'s DuckDB: tpchgen-cli, nvCOMP (both
# nvidia-nvcomp-cu13 and its library nvidia-libnvcomp-cu13, which pip download --no-deps leaves out)
wheels=$( (compgen -G ".whl/*.whl"; compgen -G ".whl-gpu/*.whl") | awk -F/ '!seen[$NF]++')  # each wheel once
if [[ -n $wheels ]]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $wheels \
    && export PYTHONPATH=src:/tmp/site PATH=/tmp/site/bin:$PATH
fi
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
gj() { python3 -m gpujoin.cli "$@"; }
# Numba's and CuPy's kernel caches filled by one process before xdist's workers start (a fresh
# machine's workers each compiled every signature: ~35 s of a small test's 50 s)
warm() { [[ -n $1 ]] && timeout 240 python3 scripts/warm_caches.py cuda 2>&1 | tail -2; }
rc=0

if [[ $stage == quick ]]; then
  python3 -m pytest -m gpu -q -x -p no:cacheprovider tests/test_cuda_join.py -k "radix or gather or dict or errors or memory" 2>&1 | tail -30
  python3 -m pytest -m gpu -q -x -p no:cacheprovider tests/test_cuda_join.py -k "matches_cpu_engine and int" 2>&1 | tail -30
  exit 0
fi
if [[ $stage == phj-passes ]]; then
  # PHJ's 9-bit unstable passes against 8-bit ones at 2^27-2^29 rows a side (LOGS, profile_phj_passes.py),
  # after the tests of the partition, PHJ and PGB (as tests-files runs them)
  FILES=${FILES:-tests/test_cuda_join.py tests/test_cuda_groupby.py}; PYTEST_K=${PYTEST_K:-nine_bit or radix or phj or pgb}
fi
if [[ $stage == tests-files || $stage == phj-passes ]]; then
  # the gpu tests of FILES one file at a time (xdist where carried), each file's whole log in $OUT and
  # its summary line printed, so that a file cut off by its TEST_TIMEOUT is told apart from one that passed;
  # each test's time in $OUT/times_FILE.txt as it ends (the slow ones of a file that was cut off)
  xdist=""; python3 -c "import xdist" 2>/dev/null && xdist="-n ${WORKERS:-8}"; warm "$xdist"
  for f in ${FILES:-tests/test_outofcore.py tests/test_multi_gpu.py tests/test_cuda_join.py}; do
    log="$OUT/pytest_$(basename "$f" .py).log"
    GPUJOIN_TEST_TIMES="$OUT/times_$(basename "$f" .py).txt" timeout ${TEST_TIMEOUT:-200} python3 -m pytest -m gpu -q \
      -p no:cacheprovider --tb=short -rf -W ignore::Warning $xdist "$f" ${PYTEST_K:+-k "$PYTEST_K"} > "$log" 2>&1
    code=$?; [[ $code == 124 ]] && echo "$f: cut off after ${TEST_TIMEOUT:-200} s" || echo "$f: $(tail -1 "$log") (rc $code)"
    [[ $code != 0 ]] && rc=1
  done
  [[ $stage == phj-passes ]] && timeout ${PROFILE_TIMEOUT:-300} python3 scripts/profile_phj_passes.py ${LOGS:-27,28,29} \
    ${RUNS:-3} 2>&1 | tee "$OUT/profile_phj_passes.txt"
  exit $rc
fi
if [[ $stage == gb-quick ]]; then
  xdist=""; python3 -c "import xdist" 2>/dev/null && xdist="-n ${WORKERS:-12}"; warm "$xdist"
  timeout ${TEST_TIMEOUT:-300} python3 -m pytest -m "gpu and not slow" -q -x -p no:cacheprovider --tb=short -rf \
    -W ignore::Warning $xdist tests/test_cuda_groupby.py 2>&1 | tee "$OUT/pytest_gb.log" | tail -40
  timeout 200 python3 -m gpujoin.cli bench group-by --device cuda --algorithm all --log2-rows 26 \
    --sweep log2_groups=4,12,20,24 --runs 3 -o "$OUT/bench_gb_quick.jsonl" 2>&1 >/dev/null | tail -30
fi
if [[ $stage == gb-profile ]]; then
  python3 scripts/profile_groupby.py 26 2>&1 | tail -40
  ncu --clock-control none -k regex:"hgb_aggregate|pgb_aggregate" -c 12 --section LaunchStats --section Occupancy \
    --section SpeedOfLight --section WarpStateStats python3 scripts/profile_groupby.py 24 once 2>&1 \
    | grep -E "hgb_agg|pgb_agg|Registers|Local|Achieved Occ|Theoretical Occ|Memory Throughput|Compute \(SM\)|Duration|Stall|Warp Cycles|Block Limit|Shared Memory Config|Dynamic Shared" | head -80
fi
if [[ $stage == part-profile ]]; then
  # the radix partition pass against its copy floor, then ncu on one scatter launch
  # (KEY_BYTES 4 or 8; the 17-bit partition's launches for ncu: COUNT of them from the SKIP-th)
  python3 scripts/profile_partition.py ${LOG2N:-27} ${KEY_BYTES:-4} ${MODE:-} 2>&1 | tee "$OUT/profile_partition.txt"
  ncu --clock-control none -k regex:"${KERNEL:-radix_scatter}" -s ${SKIP:-0} -c ${COUNT:-1} --section SpeedOfLight \
    --section WarpStateStats --section MemoryWorkloadAnalysis --section LaunchStats --section Occupancy \
    python3 scripts/profile_partition.py ${LOG2N:-27} ${KEY_BYTES:-4} ${MODE:-} once 2>&1 | cut -c1-150 \
    | tee "$OUT/ncu_partition.txt" | tail -${NCU_LINES:-110}
fi
if [[ $stage == gb-ncu ]]; then
  # one kernel in full: KERNEL (regex), the LAUNCH-th launch of it in profile_groupby.py's "once" run
  ncu --clock-control none -k regex:"${KERNEL:-pgb_aggregate}" -s ${SKIP:-2} -c 1 --section SpeedOfLight \
    --section WarpStateStats --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis \
    --section LaunchStats --section Occupancy python3 scripts/profile_groupby.py ${LOG2N:-24} once 2>&1 \
    | grep -v "^g=2" | cut -c1-150 | tail -90
fi
# paper 001's ranks under Open MPI, one a GPU, with those variables and the working tree's paths
# (every NCCL_* and GPUJOIN_* variable set here reaches the ranks: NVLink multicast off, and any tried)
mpi() { mpirun --allow-run-as-root --oversubscribe -x PYTHONPATH -x PYTHONUNBUFFERED -x PATH \
        $(compgen -e | grep '^NCCL_\|^GPUJOIN_' | sed 's/^/-x /') \
        -x TORCH_SYMM_MEM_DISABLE_MULTICAST -x NVSHMEM_DISABLE_NVLS "$@"; }
if [[ $stage == scale ]]; then
  # issue 18 on one host of G GPUs (nvidia-h200-x4 / -x8; carry .whl-gpu for compression), in
  # parts that each fit a device call (PARTS, default all three): "hybrid" paper 000's hybrid
  # join (2^31 a side, 16 GB a GPU) and "gsm" its GSM (2^29) on 1, 2, 4 (and 8) GPUs with
  # transfer-only beside the models; "dist" paper 001's join with G ranks, a GPU each, 2^28 rows
  # a rank, one level, then two levels with the ranks playing hosts of 2 and of G/2; "tpch" its
  # TPC-H join (SF, default 10) on G ranks, compression off and on, one level and hosts of 2
  export GPUJOIN_HOST_MEMORY=${GPUJOIN_HOST_MEMORY:-400GB}
  parts=" ${PARTS:-hybrid gsm dist tpch} "  # and "tests": the gpu tests on G workers and G ranks
  G=$(nvidia-smi -L | wc -l); counts=1
  for c in 2 4 8; do [[ $c -le $G ]] && counts="$counts,$c"; done
  [[ $parts == *" hybrid "* ]] && GPUS=$counts LOG2N=${LOG2N:-31} BAND="" RUNS=${RUNS:-2} INPUT=pinned TRANSFER=1 \
    timeout ${MULTI_TIMEOUT:-500} bash "$0" bench-multi 2>&1 | grep -v "^NVIDIA" | tail -30
  # "hybrid-profile": where the hybrid join's passes go on every GPU, 2^LOG2N pinned: a CUPTI
  # timeline of each GPU's copies and kernels, the GIL's switch interval shortened, the GPUs'
  # pass 2s one at a time against side by side (MODES: profile_hybrid.py's modes)
  [[ $parts == *" hybrid-profile "* ]] && timeout ${PROFILE_TIMEOUT:-300} python3 scripts/profile_hybrid.py \
    ${LOG2N:-31} phj-tr 2 ${MODES:-timeline,switch,sides} 2>&1 | tee "$OUT/profile_hybrid.txt" | tail -${LINES_MAX:-60}
  [[ $parts == *" gsm "* ]] && GPUS=$counts LOG2N=29 INNER=gsm BAND=${BAND-24} RUNS=1 INPUT=pinned TRANSFER=1 \
    timeout ${MULTI_TIMEOUT:-500} bash "$0" bench-multi 2>&1 | grep -v "^NVIDIA" | tail -30
  if [[ $parts == *" dist "* ]]; then
    for rpn in one 2 $((G / 2)); do  # (G = 4: hosts of 2 once)
      [[ $rpn == 2 && $G == 4 && -n ${seen2:-} ]] && continue; [[ $rpn == 2 ]] && seen2=1
      timeout -k 10 ${BENCH_TIMEOUT:-250} bash -c "$(declare -f mpi); mpi -n $G python3 -m gpujoin.cli bench dist \
        --rows ${ROWS:-268435456} --device cuda --placement gpu --compression ${COMPRESSION:-none} --runs ${RUNS:-3} \
        $([[ $rpn == one ]] && echo --shuffle one-level || echo --shuffle two-level --ranks-per-node $rpn) \
        -o $OUT/bench_dist.jsonl" 2>&1 | tail -6
    done
  fi
  if [[ $parts == *" tests "* ]]; then
    GPUJOIN_TEST_GPUS=$G WORKERS=${WORKERS:-0} FILES="tests/test_multi_gpu.py tests/test_dist_device.py ${FILES:-}" \
      TEST_TIMEOUT=${TEST_TIMEOUT:-250} bash "$0" tests-files
    for rpn in "''" 2; do
      timeout -k 5 150 bash -c "$(declare -f mpi); mpi -n $G python3 tests/mpi_dist_check.py $rpn cuda" 2>&1 \
        | grep -a "ok$\|rror" | tail -$((G + 2))
    done
  fi
  [[ $parts == *" tpch "* ]] && for args in "--shuffle one-level --compression none,cascaded" \
      "--shuffle two-level --ranks-per-node 2 --compression none,auto"; do
    timeout -k 10 ${BENCH_TIMEOUT:-250} bash -c "$(declare -f mpi); mpi -n $G python3 -m gpujoin.cli bench dist \
      --workload tpch --sf ${SF:-10} --device cuda --placement gpu $args --runs ${RUNS:-3} \
      -o $OUT/bench_dist.jsonl" 2>&1 | grep -v "^\s*$" | tail -9
  done
  exit 0
fi
if [[ $stage == tests-multi ]]; then
  # paper 000's multi-GPU joins (issue 15): the hybrid join and the ring, two workers (two GPUs
  # when the machine has them), then the out-of-core and join_where tests they share code with
  nvidia-smi topo -m | head -5
  timeout ${TEST_TIMEOUT:-400} python3 -m pytest -m gpu -q -x -p no:cacheprovider --tb=short -rf \
    -W ignore::Warning tests/test_multi_gpu.py ${PYTEST_EXTRA:-} ${PYTEST_K:+-k "$PYTEST_K"} 2>&1 \
    | tee "$OUT/pytest_multi.log" | tail -40
  rc=${PIPESTATUS[0]}
fi
if [[ $stage == two-gpu ]]; then
  # one call on two GPUs: the multi-GPU tests changed since their last device run (page-locked
  # input, the duplex link probe), the 2^31 hybrid join pageable and pinned beside the models,
  # then which lock keeps the GPUs' pass 2s of small pairs from running side by side
  timeout 130 python3 -m pytest -m gpu -q -x -p no:cacheprovider --tb=short -rf -W ignore::Warning \
    tests/test_multi_gpu.py -k "pinned or measure_links or transfer_only or hybrid_core" 2>&1 | tail -8
  LOG2N=31 BAND=${BAND-24} RUNS=2 INPUT=pageable,pinned TRANSFER=1 timeout ${MULTI_TIMEOUT:-400} bash "$0" bench-multi 2>&1 \
    | grep -v "^NVIDIA" | tail -30
fi
if [[ $stage == ring-gsm ]]; then
  # the θ-joins' pairs in page-locked segments and GSM's page-locked sorted copies: their tests,
  # then GSM (transfer-only beside Eqs. 4-5) and the ring's band join on 1 and 2 GPUs
  timeout 200 python3 -m pytest -m gpu -q -x -p no:cacheprovider --tb=short -rf -W ignore::Warning \
    tests/test_multi_gpu.py tests/test_cuda_join_where.py -k "ring or gsm or pinned or transfer or gpu_" 2>&1 | tail -8
  LOG2N=${LOG2N:-29} INNER=gsm BAND=${BAND-24} RUNS=${RUNS:-1} INPUT=pageable,pinned TRANSFER=1 \
    timeout ${MULTI_TIMEOUT:-330} bash "$0" bench-multi 2>&1 | grep -v "^NVIDIA\|^workload\|^log2" | tail -30
fi
if [[ $stage == pass2-locks ]]; then
  # which lock keeps the GPUs' pass 2s of small pairs from running side by side
  for m in async nopeer; do timeout 60 python3 scripts/profile_hybrid.py 28 phj-tr 2 $m 2>&1 | tail -4; done
fi
if [[ $stage == bench-multi ]]; then
  # paper 000's workloads on 1 and 2 GPUs: link ceilings, the hybrid join, the ring's band join;
  # RSHARE=0.25,0.5 (Fig. 10), TRANSFER=1 (Fig. 8: transfer-only beside the models), PEERS=duckdb
  grep -E "MemTotal" /proc/meminfo
  export GPUJOIN_HOST_MEMORY=${GPUJOIN_HOST_MEMORY:-200GB}
  gj bench multi-gpu --log2-n "${LOG2N-28}" --gpus ${GPUS:-1,2} --memory-limit ${LIMIT:-16GB} \
    --inner ${INNER:-phj-tr} --zipf ${ZIPF:-0} --output-ratio ${OUTRATIO:-1} --band-log2-n "${BAND-24}" --runs ${RUNS:-2} \
    --r-share ${RSHARE:-0.5} ${TRANSFER:+--transfer-only} --peers "${PEERS:-}" --input ${INPUT:-pageable} \
    --pools ${POOLS:-cold} -o "$OUT/bench_multi.jsonl" 2>&1 | grep -v "^log2\|^workload\|KeyError\|Traceback\|File " | tail -40
fi
if [[ $stage == null-keys ]]; then
  # device joins with null keys and the radix shuffle's one-GPU tests, then 2 ranks' checks and the
  # dist jobs (dist-cli: a left join on a key with nulls) on two GPUs
  timeout 240 python3 -m pytest -m gpu -q -p no:cacheprovider --tb=short -rf -W ignore::Warning tests/test_radix_shuffle.py \
    tests/test_cuda_device_tables.py tests/test_cuda_join.py -k "shuffle or pieces or null_keys or device_errors or \
    composite_keys_join" 2>&1 | tail -6
  timeout 200 bash -c "$(declare -f mpi); mpi -n 2 python3 tests/mpi_dist_check.py '' cuda" 2>&1 \
    | grep -v "^device \(one\|two\)-level\|^device buckets\|^device radix" | tail -5
  stage=dist-cli
fi
if [[ $stage == radix-shuffle ]]; then
  # issue 16 (two GPUs): the shuffle whose partition does the local PHJ's first radix pass
  # (dist.radix_shuffle): its one-GPU tests and the partition's, the 2-rank checks (SKIP_MPI=1:
  # none), then paper 001's random workload at ROWS a rank with the pass in the shuffle and without
  [[ -z ${SKIP_TESTS:-} ]] && timeout 300 python3 -m pytest -m gpu -q -x -p no:cacheprovider --tb=short -rf \
    -W ignore::Warning tests/test_radix_shuffle.py 2>&1 | tail -6
  [[ -z ${SKIP_TESTS:-}${SKIP_JOIN_TESTS:-} ]] && timeout 300 python3 -m pytest -m gpu -q -x -p no:cacheprovider --tb=short -rf \
    -W ignore::Warning ${PART_TESTS:-tests/test_cuda_join.py -k "radix or phj or nine_bit"} 2>&1 | tail -4
  [[ -z ${SKIP_MPI:-} ]] && timeout 300 bash -c "$(declare -f mpi); mpi -n 2 python3 tests/mpi_dist_check.py '' cuda" \
    2>&1 | grep -v "^device \(one\|two\)-level\|^device buckets" | tail -8
  # CE_FORCE=1: the 2-rank checks again with every radix-shuffle table on NCCL's copy engines
  [[ -n ${CE_FORCE:-} ]] && echo "== GPUJOIN_NCCL_CE=force" && GPUJOIN_NCCL_CE=force timeout 300 bash -c \
    "$(declare -f mpi); mpi -n 2 python3 tests/mpi_dist_check.py '' cuda" 2>&1 \
    | grep -v "^device \(one\|two\)-level\|^device buckets" | tail -8
  # TREES="ab_old/base/src src ...": the job of each tree in turn (an A/B; ab_old/ carried), its
  # records in bench_dist_N.jsonl by turn
  n=0
  for tree in ${TREES:-src}; do
    n=$((n + 1)); [[ -n ${TREES:-} ]] && echo "== $n: $tree"
    PYTHONPATH=$tree${PYTHONPATH#src} timeout -k 10 ${BENCH_TIMEOUT:-300} bash -c "$(declare -f mpi); mpi -n 2 python3 -m gpujoin.cli \
      bench dist --rows ${ROWS:-268435456} --device cuda --placement gpu --shuffle one-level \
      --shuffle-radix ${RADIX:-auto,off} --runs ${RUNS:-3} -o $OUT/bench_dist${TREES:+_$n}.jsonl" 2>&1 \
      | tee "$OUT/bench_dist${TREES:+_$n}.log" | grep -v "^\s*$" | tail -${BENCH_LINES:-12}
  done
  # NCCL_TRIES="GPUJOIN_NCCL_CE=0": send/recv instead of the copy engines (dist.registered; where
  # a table goes by send/recv, GPUJOIN_NCCL_REGISTER=1 registers its buffers).
  # NCCL_TRIES="NCCL_MAX_NCHANNELS=16 NCCL_P2P_USE_CUDA_MEMCPY=1 GPUJOIN_SHUFFLE_OVERLAP=0": the
  # pass-in-the-shuffle job again under each setting (what NCCL's kernels take from the passes beside
  # them: SMs, memory, or copy engines; the passes with no NCCL group beside them)
  python3 -c "from cupy.cuda import nccl; print('NCCL', nccl.get_version())"
  for try in ${NCCL_TRIES:-}; do
    echo "== $try"
    env "$try" timeout -k 10 ${BENCH_TIMEOUT:-300} bash -c "$(declare -f mpi); mpi -n 2 python3 -m gpujoin.cli \
      bench dist --rows ${ROWS:-268435456} --device cuda --placement gpu --shuffle one-level --shuffle-radix auto \
      --runs ${RUNS:-3} -o $OUT/bench_dist_${try%%=*}.jsonl" 2>&1 | grep -v "^\s*$" | tail -${TRY_LINES:-6}
  done
fi
if [[ $stage == tests-dist || $stage == bench-dist || $stage == shuffle-timeline || $stage == tpch-dist ]]; then
  # paper 001 (issue 16) under Open MPI, one rank a GPU: every rank its GPU (local rank), the
  # NCCL variables passed to the ranks; then 4 ranks on 2 GPUs played as 2 hosts of 2
  export GPUJOIN_HOST_MEMORY=${GPUJOIN_HOST_MEMORY:-200GB}
  if [[ $stage == tests-dist ]]; then
    timeout 200 python3 -m pytest -m gpu -q -x -p no:cacheprovider --tb=short -rf -W ignore::Warning \
      tests/test_dist_device.py 2>&1 | tail -15
    timeout 300 bash -c "$(declare -f mpi); mpi -n 2 python3 tests/mpi_dist_check.py '' cuda" 2>&1 | tail -8
    timeout 300 bash -c "$(declare -f mpi); mpi -n 4 python3 tests/mpi_dist_check.py 2 cuda" 2>&1 | tail -8
    # Hypothesis's examples, each rank joining its rows on its GPU
    timeout 200 bash -c "$(declare -f mpi); mpi -n 2 python3 tests/mpi_hypothesis_check.py '' cuda 50" 2>&1 | tail -4
    # MORE_RANKS="8:4 8:2": P ranks as hosts of R (more ranks than GPUs: ranks share a GPU)
    for spec in ${MORE_RANKS:-}; do
      echo "$spec: ${spec%%:*} ranks, ${spec##*:} a host"
      timeout 300 bash -c "$(declare -f mpi); mpi -n ${spec%%:*} python3 tests/mpi_dist_check.py ${spec##*:} cuda" 2>&1 \
        | tail -4
    done
  elif [[ -n ${PROFILE:-} ]]; then
    mpi -n ${RANKS:-2} python3 scripts/profile_dist_shuffle.py $PROFILE 2>&1 | tail -12
  fi
  if [[ $stage == shuffle-timeline ]]; then
    # when the pipelined shuffle's partitions and NCCL groups run, kernel by kernel (CUPTI, each rank)
    # (RADIX_BITS=17: the shuffle whose pass is the local PHJ's first, dist.radix_shuffle; "17 join":
    # the whole dist.join; "17 single": rank 0's one-GPU join of every rank's rows, the baseline)
    for c in ${CHUNKS:-25 40}; do
      timeout 150 bash -c "$(declare -f mpi); mpi -n ${RANKS:-2} python3 scripts/timeline_shuffle.py ${LOG2N:-28} $c \
        ${RADIX_BITS:-}" 2>&1 \
        | tee "$OUT/shuffle_timeline_${RANKS:-2}_$c.txt" | head -${LINES_MAX:-120}
    done
  fi
  if [[ $stage == tpch-dist ]]; then
    # paper 001's TPC-H join with the tables in GPU memory (carry .whl-gpu: tpchgen-cli, nvCOMP):
    # one level, compression off and cascaded, then two levels with the ranks as hosts of 1
    for args in "--shuffle one-level --compression none,cascaded" \
                "--shuffle two-level --ranks-per-node 1 --compression none,auto"; do
      timeout -k 10 ${BENCH_TIMEOUT:-200} bash -c "$(declare -f mpi); mpi -n ${RANKS:-2} python3 -m gpujoin.cli \
        bench dist --workload tpch --sf ${SF:-10} --device cuda --placement gpu $args --runs ${RUNS:-3} \
        -o $OUT/bench_dist.jsonl" 2>&1 | grep -v "^\s*$" | tail -9
    done
  fi
  if [[ $stage == bench-dist ]]; then
    # the log goes to $OUT as it comes and mpirun is stopped in time (on 2026-11-25 two calls on two
    # H100s printed nothing before the call's limit: the pipe's tail never saw mpirun end)
    timeout -k 10 ${BENCH_TIMEOUT:-300} bash -c "$(declare -f mpi); mpi -n ${RANKS:-2} python3 -m gpujoin.cli bench dist \
      --rows ${ROWS:-1e6,1e7,1e8} --device cuda --placement ${PLACEMENT:-host} \
      --shuffle ${SHUFFLE:-one-level,two-level} --compression ${COMPRESSION:-none} --runs ${RUNS:-3} \
      --buckets ${BUCKETS:-auto} -o $OUT/bench_dist.jsonl" 2>&1 | tee "$OUT/bench_dist.log" | tail -${LINES_MAX:-20}
  fi
fi
if [[ $stage == nvcomp ]]; then
  # paper 001 item 3 on one GPU: nvCOMP's cascaded codec (tests, TPC-H columns' ratio and GB/s),
  # and the compressed device shuffle with 2 ranks sharing the GPU (through host memory and MPI)
  timeout 200 python3 -m pytest -m gpu -q -x -p no:cacheprovider --tb=short -rf -W ignore::Warning \
    tests/test_dist_device.py 2>&1 | tail -15
  mpirun --allow-run-as-root --oversubscribe -x PYTHONPATH -x PATH -x NCCL_NVLS_ENABLE \
    -x TORCH_SYMM_MEM_DISABLE_MULTICAST -x NVSHMEM_DISABLE_NVLS -n 2 python3 tests/mpi_dist_check.py '' cuda 2>&1 | tail -6
  # 4 ranks as 2 hosts of 2: the two-level plan, and "auto" measuring the device links
  mpirun --allow-run-as-root --oversubscribe -x PYTHONPATH -x PATH -x NCCL_NVLS_ENABLE \
    -x TORCH_SYMM_MEM_DISABLE_MULTICAST -x NVSHMEM_DISABLE_NVLS -n 4 python3 tests/mpi_dist_check.py 2 cuda 2>&1 | tail -6
  for sf in ${SF:-1}; do gj bench compression --device cuda --sf $sf -o "$OUT/bench_compression.jsonl"; done 2>&1 | tail -8
  # the GPU-placed benchmark with compression off and on (a check of its path: ranks sharing a GPU)
  mpirun --allow-run-as-root --oversubscribe -x PYTHONPATH -x PATH -x NCCL_NVLS_ENABLE \
    -x TORCH_SYMM_MEM_DISABLE_MULTICAST -x NVSHMEM_DISABLE_NVLS -n 2 python3 -m gpujoin.cli bench dist \
    --placement gpu --device cuda --rows 1e6 --shuffle one-level --compression none,cascaded --runs 1 \
    -o "$OUT/bench_dist_check.jsonl" 2>&1 | tail -6
fi
if [[ $stage == tests-ooc ]]; then
  # the out-of-core join and group-by (issue 14) against the CPU engine, tiny memory limits
  timeout ${TEST_TIMEOUT:-500} python3 -m pytest -m gpu -q -x -p no:cacheprovider --tb=short -rf \
    -W ignore::Warning tests/test_outofcore.py ${PYTEST_K:+-k "$PYTEST_K"} 2>&1 | tee "$OUT/pytest_ooc.log" | tail -60
  rc=${PIPESTATUS[0]}
fi
if [[ $stage == bench-ooc ]]; then
  # paper 004's workloads (issue 14): the PCIe ceiling first, then the Triton join in SUM and
  # materialized modes; a virtual machine's MemAvailable grows as memory is used, so the host
  # checks are told the machine's size
  grep -E "MemTotal|MemAvailable" /proc/meminfo
  export GPUJOIN_HOST_MEMORY=${GPUJOIN_HOST_MEMORY:-120GB}
  gj bench out-of-core --log2-n ${LOG2N_TABLE:-27,28} --memory-limit ${LIMITS:-16GB} --mode ${MODES:-sum,table} \
    --runs ${RUNS:-2} -o "$OUT/bench_ooc.jsonl" 2>&1 | tail -20
  # INPUT=pageable,pinned: the same joins with the columns page-locked in place (no staging copy)
  gj bench out-of-core --log2-n ${LOG2N_SUM:-30} --memory-limit ${LIMITS:-16GB} --mode sum \
    --runs ${RUNS:-2} --baselines "${BASELINES:-}" --input ${INPUT:-pageable} -o "$OUT/bench_ooc.jsonl" 2>&1 | tail -20
fi
if [[ $stage == bench-mem ]]; then
  # every in-core join's peak GPU memory against its inputs and output (issue 14 item 5)
  f="$OUT/bench_mem.jsonl"
  gj bench join --device cuda --algorithm all --log2-r ${LOG2R:-27} --runs 2 -o "$f" >/dev/null
  gj bench join --device cuda --algorithm all --log2-r ${LOG2R:-27} --key-bytes 8 --payload-bytes 8 --runs 2 -o "$f" >/dev/null
  python3 - "$f" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line); m = r.get("memory")
    if m:
        print(f"{r['algorithm']:8} {r['workload']} {r['median_s']*1e3:8.1f} ms  inputs {m['inputs_bytes']/2**30:.2f} GiB "
              f"output {m['output_bytes']/2**30:.2f} peak {m['peak_bytes']/2**30:.2f}  x inputs {m['peak_over_inputs']:.2f}  "
              f"x (inputs+output) {m['peak_over_inputs_output']:.2f}")
PY
fi
if [[ $stage == bench-ooc-gb ]]; then
  export GPUJOIN_HOST_MEMORY=${GPUJOIN_HOST_MEMORY:-120GB}
  gj bench out-of-core-group-by --log2-rows ${LOG2N_GB:-31} --log2-groups ${LOG2G:-24} --memory-limit ${LIMITS:-16GB} \
    --runs ${RUNS:-1} --peers "${PEERS:-}" -o "$OUT/bench_ooc_gb.jsonl" 2>&1 | grep -v "^log2\|^workload" | tail -12
fi
if [[ $stage == bench-ooc-sweep ]]; then
  # paper 004 Fig. 19 (the cache from none to all of half the budget) and paper 000's 1 against 3 streams
  export GPUJOIN_HOST_MEMORY=${GPUJOIN_HOST_MEMORY:-120GB}
  gj bench out-of-core --log2-n ${LOG2N_SWEEP:-29} --memory-limit ${LIMITS:-16GB} --mode sum --cache-fraction 0,0.5,1 \
    --streams 3,1 --runs ${RUNS:-2} -o "$OUT/bench_ooc_sweep.jsonl" 2>&1 | grep "^2^" | cut -c1-120
fi
if [[ $stage == bench-host ]]; then
  # in core from host Arrow tables, 4-byte keys and payloads, result an Arrow table (ANCHORS.md:
  # Polars 9.4 s on the 16 cores at 2^28)
  export GPUJOIN_HOST_MEMORY=${GPUJOIN_HOST_MEMORY:-120GB}
  gj bench out-of-core --log2-n ${LOG2N_HOST:-28} --memory-limit none --mode arrow,table --item-bytes 4 \
    --runs ${RUNS:-3} -o "$OUT/bench_host.jsonl" 2>&1 | tail -20
fi
if [[ $stage == skew ]]; then
  # issue 17: every algorithm and `auto` on skewed and heavy-hitter inputs (one H200);
  # PARTS picks among zipf heavy mm eq gb
  f="$OUT/bench_skew.jsonl"; T=${SKEW_TIMEOUT:-200}; parts=" ${PARTS:-zipf heavy mm eq gb} "
  bj() { timeout $T python3 -m gpujoin.cli bench join --device cuda --runs ${RUNS:-3} -o "$f" "$@" 2>>"$OUT/skew_err.txt" >/dev/null; }
  [[ $parts == *" zipf "* ]] && bj --algorithm all,auto --log2-r 27 --sweep zipf=${ZIPF:-1,1.5,2}
  [[ $parts == *" heavy "* ]] && bj --algorithm all,auto --log2-r 27 --sweep heavy_share=0.01,0.1,0.5
  [[ $parts == *" mm "* ]] && bj --algorithm all,auto --log2-r 26 --distinct-keys 16777216 --sweep build_zipf=1,1.5
  [[ $parts == *" eq "* ]] && bj --algorithm ${EQ_ALGOS:-all,auto} --equal-rows 65567
  [[ $parts == *" gb "* ]] && timeout $T python3 -m gpujoin.cli bench group-by --device cuda --algorithm all,auto \
    --log2-rows 28 --sweep log2_groups=2,4 --runs 5 -o "$OUT/bench_skew_gb.jsonl" 2>>"$OUT/skew_err.txt" >/dev/null
  grep -i -B2 "error" "$OUT/skew_err.txt" | tail -8
fi
if [[ $stage == auto-sweep ]]; then
  # issue 17 item 3 and targets: what auto's statistics cost, then auto beside every algorithm on
  # the narrow/wide joins, Zipf joins, and the group-by sweeps (g = 2^2..2^26, Zipf at 2^12, 2^16)
  timeout 150 python3 scripts/profile_stats.py 2>&1 | tee "$OUT/profile_stats.txt"
  timeout 60 python3 scripts/profile_stats.py --detail 2>&1 | tee -a "$OUT/profile_stats.txt"
  f="$OUT/bench_auto.jsonl"; g="$OUT/bench_auto_gb.jsonl"; R=${RUNS:-5}
  timeout 120 python3 -m gpujoin.cli bench join --device cuda --algorithm all,auto --log2-r 27 --sweep payloads=1,2 --runs $R -o "$f" >/dev/null 2>>"$OUT/auto_err.txt"
  timeout 120 python3 -m gpujoin.cli bench join --device cuda --algorithm all,auto --log2-r 27 --payloads 2 --sweep zipf=1,2 --runs $R -o "$f" >/dev/null 2>>"$OUT/auto_err.txt"
  timeout 60 python3 -m gpujoin.cli bench join --device cuda --algorithm phj-tr,phj-ur,smj-tr,auto --log2-r 24 --runs $R -o "$f" >/dev/null 2>>"$OUT/auto_err.txt"
  timeout 150 python3 -m gpujoin.cli bench group-by --device cuda --algorithm all,auto --log2-rows 28 \
    --sweep log2_groups=${LOG2_GROUPS:-2,4,8,12,16,20,24,26} --runs $R -o "$g" >/dev/null 2>>"$OUT/auto_err.txt"
  for lg in 12 16; do
    timeout 100 python3 -m gpujoin.cli bench group-by --device cuda --algorithm all,auto --log2-rows 28 --log2-groups $lg \
      --sweep zipf=1.5,2 --runs $R -o "$g" >/dev/null 2>>"$OUT/auto_err.txt"
  done
  grep -i -B2 "error" "$OUT/auto_err.txt" | tail -8
fi
if [[ $stage == gb-planner ]]; then
  # issue 17 item 3: the group-by planner's host time at 2^24 rows (profile_planner_host.py), then
  # auto beside HGB and PGB-TR at 2^24 (g = 2^4, 2^16) and 2^28 rows (g = 2^4, 2^12, 2^16, Zipf 1.5)
  timeout 200 python3 scripts/profile_planner_host.py ${PROFILE_ARGS:-} 2>&1 | tee "$OUT/planner_host.txt" | tail -${PROFILE_TAIL:-8}
  g="$OUT/bench_gb_planner.jsonl"
  for lg in 4 16; do
    timeout 100 python3 -m gpujoin.cli bench group-by --device cuda --algorithm hgb,pgb-tr,auto --log2-rows 24 --log2-groups $lg \
      --runs ${RUNS24:-15} -o "$g" >/dev/null 2>>"$OUT/gb_err.txt"
  done
  timeout 150 python3 -m gpujoin.cli bench group-by --device cuda --algorithm hgb,pgb-tr,auto --log2-rows 28 \
    --sweep log2_groups=4,12,16 --runs ${RUNS:-5} -o "$g" >/dev/null 2>>"$OUT/gb_err.txt"
  timeout 100 python3 -m gpujoin.cli bench group-by --device cuda --algorithm hgb,pgb-tr,auto --log2-rows 28 --log2-groups 16 \
    --sweep zipf=1.5 --runs ${RUNS:-5} -o "$g" >/dev/null 2>>"$OUT/gb_err.txt"
  grep -i -B2 "error" "$OUT/gb_err.txt" | tail -8
  python3 - "$g" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    w = r["workload"]
    print(f"2^{w['log2_rows']} g=2^{w['log2_groups']} z={w['zipf']}: {r['algorithm']:7} {r.get('chosen') or '':7} "
          f"median {r['median_s'] * 1e3:.3f} ms, min {r['min_s'] * 1e3:.3f}")
PY
fi
if [[ $stage == fuzz ]]; then
  # randomized GPU-against-CPU joins, group-bys and join_wheres (scripts/fuzz_device.py), PROCS processes
  # of FUZZ_SECONDS each from seeds FIRST_SEED + 10^6 p; each failing seed printed (rerun: --only SEED);
  # OTHER_KEYS=1: the other key and value types too (uint64, bool, dates, timestamps, decimals, floats)
  for p in $(seq 0 $(( ${PROCS:-2} - 1 ))); do
    timeout $(( ${FUZZ_SECONDS:-200} + 120 )) python3 scripts/fuzz_device.py --seconds ${FUZZ_SECONDS:-200} \
      --first-seed $(( ${FIRST_SEED:-0} + 1000000 * p )) ${OTHER_KEYS:+--other-keys} > "$OUT/fuzz_$p.txt" 2>&1 &
  done
  wait
  grep -h -A2 FAIL "$OUT"/fuzz_*.txt | cut -c1-400 | head -60; grep -h "^fuzz" "$OUT"/fuzz_*.txt
  ! grep -q FAIL "$OUT"/fuzz_*.txt; exit $?
fi
if [[ $stage == dist-cli ]]; then
  # the `gpujoin dist` jobs end to end under Open MPI (RANKS ranks, a GPU each): a Parquet dataset's
  # rows moved to the GPUs, shuffled over NCCL, grouped and joined there; the part files against
  # the CPU engine (scripts/dist_cli_check.py)
  export GPUJOIN_HOST_MEMORY=${GPUJOIN_HOST_MEMORY:-200GB}
  d=$(mktemp -d) && python3 scripts/dist_cli_check.py make "$d"
  timeout 200 bash -c "$(declare -f mpi); mpi -n ${RANKS:-2} python3 -m gpujoin.cli dist group-by $d/T --by g \
    --agg s=v:sum --agg u=w:n_unique --agg n=:size --agg hi=w:max --agg m=v:mean --placement gpu --device cuda \
    -o $d/group_by" 2>&1 | tail -9
  timeout 200 bash -c "$(declare -f mpi); mpi -n ${RANKS:-2} python3 -m gpujoin.cli dist join $d/T $d/R.parquet \
    --on k --how left --placement gpu --device cuda -o $d/join" 2>&1 | tail -7
  python3 scripts/dist_cli_check.py check "$d"; exit $?
fi
if [[ $stage == fuzz-dist ]]; then
  # randomized distributed joins and group-bys (scripts/fuzz_dist.py) under Open MPI, one rank a GPU,
  # half the cases as DeviceTables shuffled over NCCL; then SPECS' "P:R" runs (P ranks as hosts of R,
  # more ranks than GPUs share them), FUZZ_SECONDS each
  export GPUJOIN_HOST_MEMORY=${GPUJOIN_HOST_MEMORY:-200GB}
  for spec in ${SPECS:-2:2 4:2}; do
    timeout -k 10 $(( ${FUZZ_SECONDS:-120} + 120 )) bash -c "$(declare -f mpi); mpi -n ${spec%%:*} python3 \
      scripts/fuzz_dist.py --device cuda --device-tables --ranks-per-node ${spec##*:} --seconds ${FUZZ_SECONDS:-120} \
      --first-seed ${FIRST_SEED:-0} --max-log2 ${MAX_LOG2:-13}" > "$OUT/fuzz_dist_${spec/:/_}.txt" 2>&1
    echo "$spec (rc $?): $(grep -h "^fuzz_dist" "$OUT/fuzz_dist_${spec/:/_}.txt")"
  done
  grep -h -A2 FAIL "$OUT"/fuzz_dist_*.txt | cut -c1-400 | head -40
  ! grep -q FAIL "$OUT"/fuzz_dist_*.txt; exit $?
fi
if [[ $stage == join-planner ]]; then
  # issue 17 item 3: the planner's samples' tests, then the join planner's host time at 2^24 rows a side
  # (profile_join_auto.py: --host's steps, then auto against the chosen algorithm), the tree in ab_old/src
  # (git archive of an older commit) and this one taking turns where ab_old/ was carried
  xdist=""; python3 -c "import xdist" 2>/dev/null && xdist="-n ${WORKERS:-8}"; warm "$xdist"
  timeout ${TEST_TIMEOUT:-300} python3 -m pytest -m gpu -q -p no:cacheprovider --tb=short -rf -W ignore::Warning $xdist \
    tests/test_cuda_join.py tests/test_cuda_groupby.py tests/test_planning.py \
    -k "${PYTEST_K:-planner or key_samples or auto or multiplicity or draws}" > "$OUT/pytest_planner.log" 2>&1; tail -3 "$OUT/pytest_planner.log"
  trees="src"; [[ -d ab_old/src ]] && trees=${TREES:-"ab_old/src src ab_old/src src"}
  timeout 120 python3 scripts/profile_join_auto.py --host 2>&1 | tee "$OUT/join_planner_host.txt"
  for t in $trees; do
    echo "== $t"
    PYTHONPATH=$t:${PYTHONPATH#src} timeout 120 python3 scripts/profile_join_auto.py 2>&1 | tee -a "$OUT/join_planner_$(echo $t | tr / _).txt"
  done
fi
if [[ $stage == item3 ]]; then
  # issue 17 item 3 as a user calls it (profile_item3.py: auto beside the algorithm it chooses,
  # through gpujoin.join / gpujoin.group_by on CuPy arrays), the tree in ab_old/src (git archive of
  # an older commit) and this one taking turns where ab_old/ was carried
  trees="src"; [[ -d ab_old/src ]] && trees=${TREES:-"ab_old/src src ab_old/src src"}
  for t in $trees; do
    echo "== $t"
    PYTHONPATH=$t:${PYTHONPATH#src} timeout ${PROFILE_TIMEOUT:-150} python3 scripts/profile_item3.py ${LOGS:-24 25} \
      --reps ${REPS:-2} --rounds ${ROUNDS:-60} 2>&1 | tee -a "$OUT/item3_$(echo $t | tr / _).txt"
  done
fi
if [[ $stage == gb-skew ]]; then
  # issue 17 item 2: every group-by algorithm and auto under Zipf keys, 2^28 rows, MAX of two
  # 4-byte columns, g = 2^LOG2_GROUPS groups (HGB's hot groups, PGB's spilled partitions)
  for lg in ${LOG2_GROUPS:-12 16 20}; do
    timeout ${GB_TIMEOUT:-150} python3 -m gpujoin.cli bench group-by --device cuda --algorithm ${GB_ALGOS:-all,auto} --log2-rows 28 \
      --log2-groups $lg --sweep zipf=${ZIPF:-0.5,0.75,1,1.5,2} --runs ${RUNS:-5} -o "$OUT/bench_gb_skew.jsonl" 2>>"$OUT/gb_err.txt" >/dev/null
  done
  grep -i -B2 "error" "$OUT/gb_err.txt" | tail -8
fi
if [[ $stage == skew-nsys ]]; then
  # kernel by kernel: PROFILE="join phj-tr log2_r=27 zipf=2" (profile_skew.py's arguments)
  nsys=$(command -v nsys || ls /usr/local/cuda/bin/nsys /opt/nvidia/nsight-*/*/host/target-linux-x64/nsys 2>/dev/null | head -1)
  $nsys profile -t cuda -o "$OUT/skew" --force-overwrite true python3 scripts/profile_skew.py ${PROFILE:-join phj-tr log2_r=27 zipf=2} 2>&1 | grep -v "^Generat\|^Collect\|^Process" | tail -8
  $nsys stats -q -r cuda_gpu_kern_sum "$OUT/skew.nsys-rep" 2>&1 | cut -c1-200 | head -${NSYS_LINES:-30}
  rm -f "$OUT"/skew.*
fi
if [[ $stage == part-msd ]]; then
  # the radix partition's passes (MSD, unstable) and the joins and group-bys over them, then the
  # stable-LSD / MSD A/B of profile_scatter.py (variants taking turns on one machine)
  xdist=""; python3 -c "import xdist" 2>/dev/null && xdist="-n ${WORKERS:-12}"; warm "$xdist"
  timeout ${TEST_TIMEOUT:-330} python3 -m pytest -m "gpu and not slow" -q -x -p no:cacheprovider --tb=short -rf \
    -W ignore::Warning $xdist tests/test_cuda_join.py tests/test_cuda_groupby.py -k "${TESTS_K:-not matches_cpu_engine or phj or pgb}" \
    2>&1 | tee "$OUT/pytest_part.log" | tail -25
  rc=${PIPESTATUS[0]}
  timeout 200 python3 scripts/profile_scatter.py 28 1,1 0,1 2>&1 | tail -8
fi
if [[ $stage == tests-join || $stage == tests-groupby ]]; then
  # one GPU test file in one call (the two together take longer than a device call may run)
  xdist=""; python3 -c "import xdist" 2>/dev/null && xdist="-n ${WORKERS:-12}"; warm "$xdist"
  file=tests/test_cuda_join.py; [[ $stage == tests-groupby ]] && file=tests/test_cuda_groupby.py
  timeout ${TEST_TIMEOUT:-500} python3 -m pytest -m gpu -q -p no:cacheprovider --tb=short -rf \
    -W ignore::Warning $xdist $file 2>&1 | tee "$OUT/pytest_$stage.log" | tail -30
  rc=${PIPESTATUS[0]}
fi
if [[ $stage == tests || $stage == all ]]; then
  # small tests on 8 workers (when pytest-xdist is there), then the 2^27-row ones alone
  # (join and group-by tests together need about 8 minutes: see tests-join, tests-groupby)
  xdist=""; python3 -c "import xdist" 2>/dev/null && xdist="-n ${WORKERS:-12}"; warm "$xdist"
  [[ -n ${POOL_LOG:-} ]] && export GPUJOIN_POOL_LOG=$OUT
  # each test's outcome as it ends: a run cut off by its limit still names its failures
  GPUJOIN_TEST_TIMES="$OUT/times_gpu.txt" timeout ${TEST_TIMEOUT:-420} python3 -m pytest -m "gpu and not slow" -q \
    -p no:cacheprovider --tb=short -rf -W ignore::Warning $xdist tests/ 2>&1 | tee "$OUT/pytest_gpu.log" | tail -30
  rc=${PIPESTATUS[0]}
  echo "outcomes: $(awk '{print $2}' "$OUT/times_gpu.txt" | sort | uniq -c | xargs)"
  grep -v " passed " "$OUT/times_gpu.txt" | head -20; sort -rn "$OUT/times_gpu.txt" | head -5
  timeout ${TEST_TIMEOUT:-420} python3 -m pytest -m "gpu and slow" -q -p no:cacheprovider --tb=short -rf \
    tests/ 2>&1 | tee -a "$OUT/pytest_gpu.log" | tail -10
  [[ $rc == 0 ]] && rc=${PIPESTATUS[0]}
fi
if [[ $stage == profile || $stage == all ]]; then
  # per-kernel timings, and the faster register budget of the radix scatter for what follows
  python3 scripts/profile_kernels.py "$OUT/best_minb.txt" 2>&1 | tee "$OUT/profile.txt"
  [[ -s "$OUT/best_minb.txt" ]] && export GPUJOIN_SCATTER_MINB=$(cat "$OUT/best_minb.txt")
fi
if [[ $stage == bench || $stage == all ]]; then
  # paper 003's default workloads (ANCHORS.md): |R| = |S| = 2^27, one and two 4-byte payloads a side
  gj bench join --device cuda --algorithm all,auto --log2-r 27 --sweep payloads=1,2 --runs 7 -o "$OUT/bench_join.jsonl" >/dev/null
fi
if [[ $stage == sweeps || $stage == all ]]; then
  f="$OUT/bench_join_sweeps.jsonl"
  gj bench join --device cuda --algorithm all,auto --log2-r 27 --payloads 2 --sweep match_ratio=0.5,0.25,0.125 --runs 5 -o "$f" >/dev/null
  gj bench join --device cuda --algorithm all,auto --log2-r 27 --payloads 2 --sweep zipf=0.5,1.0,1.5,2.0 --runs 5 -o "$f" >/dev/null
  gj bench join --device cuda --algorithm all,auto --log2-r 27 --sweep payloads=3,4,5,6 --runs 5 -o "$f" >/dev/null
  gj bench join --device cuda --algorithm all,auto --log2-r 27 --key-bytes 8 --payload-bytes 8 --runs 5 -o "$f" >/dev/null
  gj bench join --device cuda --algorithm all,auto --log2-r 27 --key-bytes 4 --payload-bytes 8 --runs 5 -o "$f" >/dev/null
  gj bench join --device cuda --algorithm all,auto --log2-s 27 --payloads 2 --sweep log2_r=23,25 --runs 5 -o "$f" >/dev/null
  # paper 003 Fig. 6: |S| = 2 |R|
  gj bench join --device cuda --algorithm all,auto --log2-r 26 --log2-s 27 --payloads 2 --runs 5 -o "$f" >/dev/null
  gj bench join --device cuda --algorithm all,auto --log2-r 26 --payloads 2 --sweep distinct_keys=8388608,16777216,33554432 --runs 5 -o "$f" >/dev/null
fi
if [[ $stage == groupby || $stage == all ]]; then
  # paper 003 §5 / ANCHORS.md: 2^28 rows, 4-byte keys uniform over g groups, MAX of two 4-byte columns
  gj bench group-by --device cuda --algorithm all,auto --log2-rows 28 \
    --sweep log2_groups=2,4,6,8,10,12,14,16,18,20,22,24,26 --runs 5 -o "$OUT/bench_groupby.jsonl" >/dev/null
fi
if [[ $stage == groupby-sweeps || $stage == all ]]; then
  # paper 003 Figs. 15-20: 8-byte keys, and Zipf skew at g = 2^12 and 2^16
  f="$OUT/bench_groupby_sweeps.jsonl"
  gj bench group-by --device cuda --algorithm all,auto --log2-rows 28 --key-bytes 8 \
    --sweep log2_groups=4,10,16,20,24 --runs 5 -o "$f" >/dev/null
  for g in 12 16; do
    gj bench group-by --device cuda --algorithm all,auto --log2-rows 28 --log2-groups $g \
      --sweep zipf=0.5,1.0,1.5,2.0 --runs 5 -o "$f" >/dev/null
  done
fi
if [[ $stage == tpch-gb || $stage == all ]]; then
  # TPC-H SF10 Q18 (its time is mostly GROUP BY l_orderkey over lineitem): group-by on the GPU
  # (after) and on the CPU engine (before), joins on the GPU in both, DuckDB alongside
  timeout ${TPCH_TIMEOUT:-400} python3 scripts/tpch_groupby.py 10 "$OUT/tpch_groupby.jsonl" 2>&1 | tail -20
fi
if [[ $stage == tpch-gpu || $stage == all ]]; then
  # the TPC-H job at scale factor 10 with joins and group-bys on the GPU, every result validated
  # against DuckDB on the machine's CPUs (issue 3)
  timeout ${TPCH_TIMEOUT:-540} python3 -m gpujoin.cli tpch --sf 10 --device cuda --repeat 3 \
    --json "$OUT/tpch_sf10_gpu.jsonl" 2>&1 | tail -20
fi
if [[ $stage == tpch-profile ]]; then
  # where each query's time goes on the GPU (cProfile, own time first)
  timeout ${TPCH_TIMEOUT:-300} python3 scripts/profile_tpch.py ${SF:-10} cuda 2>&1 | grep -v "^$" \
    | grep -E "===|^ +[0-9]" | cut -c1-150 | tee "$OUT/profile_tpch.txt" | tail -${PROFILE_LINES:-90}
fi
if [[ $stage == fig6 ]]; then
  # paper 003 Fig. 6 only: |S| = 2 |R|, and 5 payload columns
  f="$OUT/bench_join_fig6.jsonl"
  gj bench join --device cuda --algorithm all,auto --log2-r 26 --log2-s 27 --payloads 2 --runs 5 -o "$f" >/dev/null
  gj bench join --device cuda --algorithm all,auto --log2-r 27 --payloads 5 --runs 5 -o "$f" >/dev/null
fi
if [[ $stage == cpu-joins || $stage == all ]]; then
  # paper 002 on this host's cores: CPU joins against thread count, DuckDB, the GPU bitmap join
  timeout ${CPU_JOINS_TIMEOUT:-300} python3 -m gpujoin.cli bench cpu-joins --log2-n 22,23,24 --threads 1,2,4,8,16 \
    --runs ${CPU_JOINS_RUNS:-2} --peers duckdb --gpu -o "$OUT/cpu_joins.jsonl" 2>&1 >/dev/null | tail -40
fi
python3 - "$OUT" <<'PY'
import json, pathlib, sys
try:
    from gpujoin.bench.workloads import GroupByWorkload, JoinWorkload
    defaults = {"join": JoinWorkload().describe(), "group-by": GroupByWorkload().describe()}
except Exception:
    defaults = {}
rows = [json.loads(l) for p in sorted(pathlib.Path(sys.argv[1]).glob("bench_*.jsonl")) for l in p.read_text().splitlines() if l]
print(f"{'workload':58} {'algorithm':15} {'median ms':>10} {'G tuples/s':>10}  phases ms")
for r in (r for r in rows if "phases_s" in r and "algorithm" in r):  # the join and group-by benchmarks
    w = r["workload"]
    base = defaults.get(r["benchmark"], {})
    d = " ".join(f"{k}={v}" for k, v in w.items() if k != "seed" and (k.startswith("log2") or base.get(k) != v))
    ph = " ".join(f"{k[:5]}={v*1e3:.2f}" for k, v in r["phases_s"].items())
    algo = r["algorithm"] + (f"({r['chosen']})" if "chosen" in r else "")
    print(f"{d[:58]:58} {algo:15} {r['median_s']*1e3:10.2f} {r['throughput_g_per_s']:10.2f}  {ph}")
PY
exit $rc
