// Session configuration entries for onnxruntime-node, shared by the benchmark scripts.
'use strict';

// "session.x64quantprecision=1" -> { session: { x64quantprecision: "1" } }, as the binding reads it.
function extraOptions(entries) {
  const extra = {};
  for (const entry of entries) {
    const at = entry.indexOf('=');
    if (at < 0) throw new Error(`--config ${entry}: expected KEY=VALUE`);
    const keys = entry.slice(0, at).split('.');
    let node = extra;
    for (const key of keys.slice(0, -1)) node = node[key] = node[key] || {};
    node[keys[keys.length - 1]] = entry.slice(at + 1);
  }
  return extra;
}

module.exports = { extraOptions };
