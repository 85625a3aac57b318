// Runs ONNX Runtime (npm onnxruntime-node, CPU) on a batch of inputs and writes its first output per
// input, for accuracy comparisons (bench/int8_accuracy.py).
//   node bench/ort_outputs.js MODEL INPUTS.raw OUTPUTS.raw [--threads N] [--config KEY=VALUE ...]
// INPUTS.raw holds float32 inputs back to back, each of the model's only input's declared shape
// (symbolic dims = 1); OUTPUTS.raw receives the float32 output of each, in order. --config sets a
// session configuration entry (session.x64quantprecision=1: ONNX Runtime's exact int8 products on
// CPUs without VNNI). Prints {"outputs": count, "output_shape": [...]} as JSON.
'use strict';
const fs = require('fs');
const ort = require('onnxruntime-node');
const {extraOptions} = require('./ort_config');

function parseArgs(argv) {
  const options = {threads: 1, config: []};
  const positional = [];
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i];
    if (!arg.startsWith('--')) {
      positional.push(arg);
      continue;
    }
    const name = arg.slice(2);
    const value = argv[++i];
    if (value === undefined) throw new Error(`--${name} needs a value`);
    if (name === 'threads')
      options.threads = Number(value);
    else if (name === 'config')
      options.config.push(value);
    else
      throw new Error(`unknown option --${name}`);
  }
  if (positional.length !== 3) throw new Error('expected MODEL INPUTS.raw OUTPUTS.raw');
  return {model: positional[0], inputs: positional[1], outputs: positional[2], ...options};
}

async function main() {
  const args = parseArgs(process.argv.slice(2));
  const session = await ort.InferenceSession.create(args.model, {
    intraOpNumThreads: args.threads,
    graphOptimizationLevel: 'all',
    extra: extraOptions(args.config),
  });
  if (session.inputMetadata.length !== 1 || session.inputMetadata[0].type !== 'float32')
    throw new Error('the model must have one float32 input');
  const meta = session.inputMetadata[0];
  const dims = meta.shape.map((d) => (typeof d === 'number' && d >= 0 ? d : 1));
  const size = dims.reduce((a, b) => a * b, 1);
  const bytes = fs.readFileSync(args.inputs);
  const all = new Float32Array(bytes.buffer, bytes.byteOffset, bytes.length / 4);
  if (all.length === 0 || all.length % size !== 0)
    throw new Error(`${args.inputs} does not hold whole inputs of [${dims}] float32`);
  const chunks = [];
  let shape = [];
  for (let start = 0; start < all.length; start += size) {
    const feeds =
        {[meta.name]: new ort.Tensor('float32', Float32Array.from(all.subarray(start, start + size)), dims)};
    const result = await session.run(feeds);
    const output = result[session.outputNames[0]];
    shape = output.dims;
    chunks.push(Buffer.from(output.data.buffer, output.data.byteOffset, output.data.byteLength));
  }
  fs.writeFileSync(args.outputs, Buffer.concat(chunks));
  console.log(JSON.stringify({outputs: chunks.length, output_shape: shape}));
}

main().catch((error) => {
  console.error(`ort_outputs: error: ${error.message}`);
  process.exit(1);
});
