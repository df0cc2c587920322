// bench/serve-bench.mjs: moat serve through the real E2B SDK (issue 15 item 6).
// Run by bench/serve.sh (through tests/serve/run.sh, which starts moat serve
// and sets E2B_API_URL, E2B_SANDBOX_URL, E2B_API_KEY).
//   1. one warm-up create (the first one from `base` may build the template),
//   2. RUNS (20) times, one after the other: Sandbox.create -> the first
//      commands.run('echo hi') result (wall ms, median and p99),
//   3. CONCURRENT (10) creates at once, each followed by its first run: the
//      wall time until all are done, and each one's median/max.
// Every sandbox is killed after its sample (not timed). Writes the JSON to
// $SERVE_BENCH_JSON (default build/bench/serve.json) and prints a summary.
import { createRequire } from 'node:module';
import { mkdirSync, writeFileSync } from 'node:fs';
import { dirname } from 'node:path';
// The SDK installed for the tests (tests/serve/node_modules, the lockfile's version).
const require = createRequire(new URL('../tests/serve/package.json', import.meta.url));
const { Sandbox } = require('e2b');
const sdkVersion = require('e2b/package.json').version;

const RUNS = Number(process.env.RUNS) || 20;
const CONCURRENT = Number(process.env.CONCURRENT) || 10;
const TEMPLATE = process.env.E2B_TEST_TEMPLATE || 'base';
const SLOW = Math.max(1, Number(process.env.MOAT_TEST_SLOW) || 1);
const opts = { requestTimeoutMs: 60_000 * SLOW };
const out = process.env.SERVE_BENCH_JSON || 'build/bench/serve.json';

// Nearest-rank percentile of a sorted copy.
function pct(xs, p) {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.max(0, Math.ceil((p / 100) * s.length) - 1))];
}
const r1 = (x) => Math.round(x * 10) / 10;
async function createToFirstRun() {
  const t0 = performance.now();
  const s = await Sandbox.create(TEMPLATE, { ...opts, timeoutMs: 600_000 });
  const r = await s.commands.run('echo hi', opts);
  const ms = performance.now() - t0;
  if (r.stdout !== 'hi\n' || r.exitCode !== 0) throw new Error(`echo hi gave ${JSON.stringify(r)}`);
  return { ms, s };
}

const res = { sdk: `e2b ${sdkVersion}`, node: process.versions.node, template: TEMPLATE, runs: RUNS, concurrent: CONCURRENT };
try {
  const w = await createToFirstRun();
  res.warmup_ms = r1(w.ms);
  await w.s.kill(opts);

  const seq = [];
  for (let i = 0; i < RUNS; i++) {
    const { ms, s } = await createToFirstRun();
    seq.push(ms);
    await s.kill(opts);
  }
  res.create_to_first_run_ms = { median: r1(pct(seq, 50)), p99: r1(pct(seq, 99)), min: r1(Math.min(...seq)), samples: seq.map(r1) };

  const t0 = performance.now();
  const all = await Promise.all(Array.from({ length: CONCURRENT }, () => createToFirstRun()));
  const wall = performance.now() - t0;
  const each = all.map((x) => x.ms);
  await Promise.all(all.map((x) => x.s.kill(opts)));
  res.concurrent_ms = { wall: r1(wall), median: r1(pct(each, 50)), max: r1(Math.max(...each)), samples: each.map(r1) };
} catch (e) {
  res.error = `${e.name}: ${e.message}${e.cause ? ` (cause: ${e.cause.code || e.cause.message || e.cause})` : ''}`;
}
mkdirSync(dirname(out), { recursive: true });
writeFileSync(out, `${JSON.stringify(res, null, 2)}\n`);
if (res.error) {
  console.log(`FAIL: bench/serve: ${res.error}`);
  process.exit(1);
}
console.log(`serve bench (${res.sdk}, node ${res.node}, template ${TEMPLATE}):`);
console.log(`  first create (may build the template): ${res.warmup_ms} ms`);
console.log(`  Sandbox.create -> first commands.run, ${RUNS} in a row: median ${res.create_to_first_run_ms.median} ms, p99 ${res.create_to_first_run_ms.p99} ms, min ${res.create_to_first_run_ms.min} ms`);
console.log(`  ${CONCURRENT} at once: all done in ${res.concurrent_ms.wall} ms; each: median ${res.concurrent_ms.median} ms, max ${res.concurrent_ms.max} ms`);
console.log(`  JSON: ${out}`);
