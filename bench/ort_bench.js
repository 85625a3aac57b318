// Times ONNX Runtime (npm onnxruntime-node, CPU) on one model, the way `kiln bench` times kiln:
// seeded random inputs, symbolic dims = --batch, warm-up runs untimed, median/p10/p90 latency.
// The JSON carries "machine", the cpu lines of `kiln info`, as bench/machine.py reads them.
//   node bench/ort_bench.js MODEL [--threads N] [--batch B] [--warmup W] [--iters N] [--kiln build/kiln]
//                           [--execution-mode sequential|parallel] [--interop N] [--profile 0|1]
//                           [--input NAME=FILE] [--config KEY=VALUE]
// --input feeds NAME from FILE (raw little-endian float32 of the input's declared shape) instead of
// a random draw: a detection model's time depends on how many boxes its input makes.
// --config sets a session configuration entry (session.x64quantprecision=1: ONNX Runtime's exact int8
// products on CPUs without VNNI).
// --profile 1 turns on ONNX Runtime's own profiling (enableProfiling; its JSON goes to the system's
// temporary folder and is deleted afterwards), to measure what profiling costs it.
'use strict';
const { execFileSync } = require('child_process');
const fs = require('fs');
const os = require('os');
const path = require('path');
const ort = require('onnxruntime-node');
const {extraOptions} = require('./ort_config');

const MACHINE_LINE = /^(cpu:|cpu capability:|isa in effect:)/;

function parseArgs(argv) {
  const options = {
    threads: 1,
    batch: 1,
    warmup: 5,
    iters: 20,
    kiln: path.join(__dirname, '..', 'build', 'kiln'),
    'execution-mode': 'sequential',
    interop: 1,
    profile: 0,
    input: '',
    config: ''
  };
  const positional = [];
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i];
    if (!arg.startsWith('--')) { positional.push(arg); continue; }
    const name = arg.slice(2);
    if (!(name in options)) throw new Error(`unknown option --${name}`);
    const value = argv[++i];
    options[name] = typeof options[name] === 'number' ? Number(value) : value;
  }
  if (positional.length !== 1) throw new Error('expected one MODEL path');
  return { model: positional[0], ...options };
}

function randomTensor(meta, batch, seed) {
  const dims = meta.shape.map((d) => (typeof d === 'number' && d >= 0 ? d : batch));
  const count = dims.reduce((a, b) => a * b, 1);
  let state = seed >>> 0;
  const next = () => { state = (state * 1664525 + 1013904223) >>> 0; return state / 4294967296; };
  if (meta.type === 'float32') {
    const data = new Float32Array(count);
    for (let i = 0; i < count; i++) data[i] = next() * 2 - 1;
    return new ort.Tensor('float32', data, dims);
  }
  if (meta.type === 'int64') {
    const data = new BigInt64Array(count);
    for (let i = 0; i < count; i++) data[i] = BigInt(Math.floor(next() * 10));
    return new ort.Tensor('int64', data, dims);
  }
  throw new Error(`input ${meta.name}: dtype ${meta.type} not supported by this script`);
}

// Like bench/machine.py: without kiln, the results still print, with a line saying why the machine is unknown.
function machineLines(kiln) {
  try {
    const info = execFileSync(kiln, ['info'], { encoding: 'utf8', timeout: 60000 });
    return info.split('\n').filter((line) => MACHINE_LINE.test(line));
  } catch (error) {
    return [`machine: unknown (${kiln} info failed: ${error.message.split('\n')[0]})`];
  }
}

async function main() {
  const args = parseArgs(process.argv.slice(2));
  const machine = machineLines(args.kiln);
  // Memory in MB from /proc/self/status ("VmRSS" now, "VmHWM" peak), as kiln bench reports it.
  const statusMb = (field) => {
    const line =
        fs.readFileSync('/proc/self/status', 'utf8').split('\n').find((l) => l.startsWith(field + ':'));
    return line ? Number(line.split(/\s+/)[1]) / 1024 : -1;
  };
  const baselineRssMb = statusMb('VmRSS');
  const createStart = process.hrtime.bigint();
  const session = await ort.InferenceSession.create(args.model, {
    intraOpNumThreads: args.threads,
    interOpNumThreads: args.interop,
    graphOptimizationLevel: 'all',
    executionMode: args['execution-mode'],
    enableProfiling: args.profile === 1,
    profileFilePrefix: path.join(os.tmpdir(), `ort_bench_profile_${process.pid}`),
    extra: extraOptions(args.config ? [args.config] : []),
  });
  const feeds = {};
  session.inputMetadata.forEach((meta, index) => { feeds[meta.name] = randomTensor(meta, args.batch, index + 1); });
  if (args.input) {
    const [name, file] = args.input.split('=');
    const meta = session.inputMetadata.find((m) => m.name === name);
    if (!meta || meta.type !== 'float32')
      throw new Error(`--input: the model has no float32 input '${name}'`);
    const bytes = fs.readFileSync(file);
    const data = new Float32Array(bytes.buffer, bytes.byteOffset, bytes.length / 4);
    const dims = meta.shape.map((d) => (typeof d === 'number' && d >= 0 ? d : args.batch));
    if (data.length !== dims.reduce((a, b) => a * b, 1))
      throw new Error(`--input: ${file} does not hold [${dims}] float32`);
    feeds[name] = new ort.Tensor('float32', Float32Array.from(data), dims);
  }
  const createMs = Number(process.hrtime.bigint() - createStart) / 1e6;
  const firstStart = process.hrtime.bigint();
  await session.run(feeds);
  const firstRunMs = Number(process.hrtime.bigint() - firstStart) / 1e6;
  const peakRssAfterFirstRunMb = statusMb('VmHWM');
  for (let i = 0; i < args.warmup; i++) await session.run(feeds);
  const times = [];
  for (let i = 0; i < args.iters; i++) {
    const start = process.hrtime.bigint();
    await session.run(feeds);
    times.push(Number(process.hrtime.bigint() - start) / 1e6);
  }
  if (args.profile === 1) {
    if (typeof session.endProfiling === 'function') session.endProfiling();
    if (typeof session.release === 'function') await session.release();
    for (const file of fs.readdirSync(os.tmpdir())) {
      if (file.startsWith(`ort_bench_profile_${process.pid}`)) fs.rmSync(path.join(os.tmpdir(), file));
    }
  }
  times.sort((a, b) => a - b);
  const pick = (q) => times[Math.min(times.length - 1, Math.round(q * (times.length - 1)))];
  console.log(JSON.stringify({
    runtime: 'onnxruntime',
    version: ort.env.versions.common,
    model: args.model,
    threads: args.threads,
    execution_mode: args['execution-mode'],
    interop: args.interop,
    profiled: args.profile === 1,
    batch: args.batch,
    create_ms: createMs,
    first_run_ms: firstRunMs,
    baseline_rss_mb: baselineRssMb,
    peak_rss_after_first_run_mb: peakRssAfterFirstRunMb,
    steady_rss_mb: statusMb('VmRSS'),
    median_ms: pick(0.5),
    p10_ms: pick(0.1),
    p90_ms: pick(0.9),
    machine
  }));
}

main().catch((error) => { console.error(`ort_bench: error: ${error.message}`); process.exit(1); });
