// tests/serve/e2b-test.mjs: `moat serve` driven by the real E2B JavaScript SDK
// (the `e2b` package pinned in package-lock.json), the way an unchanged E2B
// program drives it. docs/testing.md says where it runs.
//
//   E2B_API_URL=http://127.0.0.1:3000 E2B_SANDBOX_URL=http://127.0.0.1:49983 \
//   E2B_API_KEY=... node tests/serve/e2b-test.mjs
//
// Prints one `PASS: serve: NAME (...)` or `FAIL: serve: NAME: why` line per
// check and exits 1 if any failed (2: usage; 0 with `SKIPPED:` when node is
// too old for the SDK). MOAT_TEST_SLOW=N multiplies every time limit (the
// nested L1 runs under QEMU TCG). E2B_TEST_TEMPLATE picks the template
// (default `base`).
import { createHash, randomBytes } from 'node:crypto';
import { createServer } from 'node:http';

const NODE_MIN = [20, 18, 1]; // e2b 2.51.0's engines.node
const have = process.versions.node.split('.').map(Number);
for (let i = 0; i < 3; i++) {
  if (have[i] > NODE_MIN[i]) break;
  if (have[i] < NODE_MIN[i]) {
    console.log(`SKIPPED: serve: node ${process.versions.node} is older than ${NODE_MIN.join('.')} (e2b needs it)`);
    process.exit(0);
  }
}
for (const v of ['E2B_API_URL', 'E2B_SANDBOX_URL', 'E2B_API_KEY']) {
  if (!process.env[v]) {
    console.error(`e2b-test: ${v} is not set`);
    process.exit(2);
  }
}
// Dynamic import: the version check above must run before the SDK loads.
const { Sandbox, CommandExitError, AuthenticationError, NotFoundError } = await import('e2b');

const SLOW = Math.max(1, Number(process.env.MOAT_TEST_SLOW) || 1);
const TEMPLATE = process.env.E2B_TEST_TEMPLATE || 'base';
const ENVD = process.env.E2B_SANDBOX_URL.replace(/\/+$/, '');
const REQ_MS = 30_000 * SLOW;               // per SDK request
const opts = { requestTimeoutMs: REQ_MS };
const runOpts = { requestTimeoutMs: REQ_MS, timeoutMs: 60_000 * SLOW };

let failures = 0;
const started = performance.now();
function ms(t0) { return `${Math.round(performance.now() - t0)} ms`; }
function assert(cond, what) { if (!cond) throw new Error(what); }
function why(e) {
  if (!(e instanceof Error)) return String(e);
  let s = `${e.name}: ${e.message}`;
  if (e instanceof CommandExitError) s += ` (exit code ${e.exitCode}, stderr ${JSON.stringify(e.stderr)})`;
  if (e.cause) s += ` (cause: ${e.cause.code || e.cause.message || e.cause})`;
  return s.replace(/\s+/g, ' ').slice(0, 600);
}
// One check: a PASS or FAIL line; the check's own detail string is added.
async function check(name, fn) {
  const t0 = performance.now();
  try {
    const detail = await fn();
    console.log(`PASS: serve: ${name} (${ms(t0)}${detail ? `; ${detail}` : ''})`);
    return true;
  } catch (e) {
    failures++;
    console.log(`FAIL: serve: ${name}: ${why(e)} (after ${ms(t0)})`);
    if (process.env.E2B_TEST_VERBOSE && e instanceof Error) console.log(e.stack);
    return false;
  }
}
// expectReject(promise, test, what): the promise must reject with an error
// that test() accepts; returns that error.
async function expectReject(p, test, what) {
  let v;
  try { v = await p; } catch (e) {
    assert(test(e), `${what}: wrong error ${why(e)}`);
    return e;
  }
  throw new Error(`${what}: succeeded (${JSON.stringify(v)?.slice(0, 200)}) where it must fail`);
}
function withTimeout(p, limitMs, what) {
  let t;
  return Promise.race([p, new Promise((_, rej) => { t = setTimeout(() => rej(new Error(`${what}: no answer in ${limitMs} ms`)), limitMs); })])
    .finally(() => clearTimeout(t));
}
const sha256 = (b) => createHash('sha256').update(b).digest('hex');
const sleep = (t) => new Promise((r) => setTimeout(r, t));
async function listAll(o) {
  const p = Sandbox.list({ ...opts, ...o });
  const out = [];
  while (p.hasNext) out.push(...await p.nextItems());
  return out;
}
// An envd call made by hand, so the token can be wrong: Connect unary JSON.
async function envdStat(sandboxId, token, path) {
  const headers = {
    'Content-Type': 'application/json', 'Connect-Protocol-Version': '1',
    'E2b-Sandbox-Id': sandboxId, 'E2b-Sandbox-Port': '49983',
  };
  if (token !== undefined) headers['X-Access-Token'] = token;
  const r = await fetch(`${ENVD}/filesystem.Filesystem/Stat`, {
    method: 'POST', headers, body: JSON.stringify({ path }), signal: AbortSignal.timeout(REQ_MS),
  });
  return { status: r.status, body: await r.text() };
}
async function envdGetFile(sandboxId, token, path) {
  const r = await fetch(`${ENVD}/files?path=${encodeURIComponent(path)}`, {
    headers: { 'E2b-Sandbox-Id': sandboxId, 'E2b-Sandbox-Port': '49983', 'X-Access-Token': token },
    signal: AbortSignal.timeout(REQ_MS),
  });
  return { status: r.status, body: await r.text() };
}
const refused = (s) => s === 401 || s === 403;

const made = [];            // every sandbox this run created: killed at the end
let a = null, b = null;     // the two sandboxes most checks use
const need = (s, n) => { assert(s, `no sandbox ${n} (its create failed)`); return s; };

// 1. Create from the template.
await check('create', async () => {
  const t0 = performance.now();
  a = await Sandbox.create(TEMPLATE, { ...opts, timeoutMs: 3600_000, metadata: { suite: 'moat-e2b-test' } });
  made.push(a.sandboxId);
  assert(typeof a.sandboxId === 'string' && a.sandboxId.length > 0, `sandboxId ${a.sandboxId}`);
  assert(typeof a.envdAccessToken === 'string' && a.envdAccessToken.length >= 16,
    `envdAccessToken missing or short: ${a.envdAccessToken}`);
  return `${a.sandboxId} in ${ms(t0)}`;
});

await check('commands.run echo', async () => {
  const r = await need(a, 'a').commands.run('echo hi', runOpts);
  assert(r.exitCode === 0, `exitCode ${r.exitCode}`);
  assert(r.stdout === 'hi\n', `stdout ${JSON.stringify(r.stdout)}`);
  assert(r.stderr === '', `stderr ${JSON.stringify(r.stderr)}`);
});

await check('commands.run non-zero exit', async () => {
  const e = await expectReject(need(a, 'a').commands.run('echo to-err >&2; echo out; exit 3', runOpts),
    (x) => x instanceof CommandExitError, 'exit 3');
  assert(e.exitCode === 3, `exitCode ${e.exitCode}`);
  assert(e.stdout === 'out\n', `stdout ${JSON.stringify(e.stdout)}`);
  assert(e.stderr === 'to-err\n', `stderr ${JSON.stringify(e.stderr)}`);
});

await check('commands.run onStdout streamed', async () => {
  const chunks = [];
  const r = await need(a, 'a').commands.run('for i in 1 2 3; do echo line$i; sleep 1; done; echo e >&2', {
    ...runOpts,
    onStdout: (d) => chunks.push({ d, t: performance.now() }),
  });
  const done = performance.now();
  const all = chunks.map((c) => c.d).join('');
  assert(r.exitCode === 0, `exitCode ${r.exitCode}`);
  assert(all === 'line1\nline2\nline3\n', `callbacks gave ${JSON.stringify(all)}`);
  assert(r.stdout === all, `result stdout ${JSON.stringify(r.stdout)}`);
  assert(r.stderr === 'e\n', `result stderr ${JSON.stringify(r.stderr)}`);
  assert(chunks.length >= 2, `${chunks.length} callback(s): the output came in one piece, not streamed`);
  // line1 was printed >= 2 s before the command ended: it must have arrived before the end.
  assert(done - chunks[0].t >= 1000, `first chunk only ${Math.round(done - chunks[0].t)} ms before the end`);
  return `${chunks.length} callbacks`;
});

await check('background command and kill', async () => {
  const s = need(a, 'a');
  // `sleep` processes with 4242 in their arguments, from /proc (not the shell's own).
  const count = async () => (await s.commands.run(
    'for p in /proc/[0-9]*; do [ "$(cat $p/comm 2>/dev/null)" = sleep ] && tr "\\0" " " <$p/cmdline; echo; done | grep -c 4242 || true',
    runOpts)).stdout.trim();
  const h = await s.commands.run('sleep 4242', { ...runOpts, background: true });
  assert(Number.isInteger(h.pid) && h.pid > 0, `pid ${h.pid}`);
  const before = await count();
  assert(before === '1', `'sleep 4242' processes before kill: ${before}`);
  const listed = await s.commands.list(opts);
  assert(listed.some((p) => p.pid === h.pid), `commands.list has no pid ${h.pid}: ${JSON.stringify(listed)}`);
  const killed = await h.kill();
  assert(killed === true, `kill() returned ${killed}`);
  await withTimeout(expectReject(h.wait(), (x) => x instanceof CommandExitError, 'wait() after kill'),
    30_000 * SLOW, 'wait() after kill');
  const after = await count();
  assert(after === '0', `'sleep 4242' processes after kill: ${after}`);
  return `pid ${h.pid}`;
});

await check('files write/read 1 MiB', async () => {
  const s = need(a, 'a');
  const data = randomBytes(1 << 20);
  const w = await s.files.write('/tmp/big.bin', new Blob([data]), opts);
  assert(w && w.path === '/tmp/big.bin', `write returned ${JSON.stringify(w)}`);
  const back = await s.files.read('/tmp/big.bin', { ...opts, format: 'bytes' });
  assert(back.length === data.length, `read ${back.length} bytes of ${data.length}`);
  assert(sha256(back) === sha256(data), 'read back different bytes (sha256)');
  const inGuest = (await s.commands.run('sha256sum /tmp/big.bin', runOpts)).stdout.split(/\s/)[0];
  assert(inGuest === sha256(data), `sha256sum in the sandbox ${inGuest} != ${sha256(data)}`);
  return `sha256 ${sha256(data).slice(0, 16)}`;
});

await check('files write gzip: true', async () => {
  const s = need(a, 'a');
  const data = randomBytes(256 << 10);
  await s.files.write('/tmp/gz.bin', new Blob([data]), { ...opts, gzip: true });
  const inGuest = (await s.commands.run('sha256sum /tmp/gz.bin', runOpts)).stdout.split(/\s/)[0];
  assert(inGuest === sha256(data), `sha256sum in the sandbox ${inGuest} != ${sha256(data)} (the gzip body was not decoded)`);
  return `sha256 ${inGuest.slice(0, 16)}`;
});

await check('pty: create, input, resize, kill', async () => {
  const s = need(a, 'a');
  let tty = '';
  const dec = new TextDecoder(), enc = new TextEncoder();
  const seen = async (re) => {
    for (let t0 = Date.now(); !re.test(tty); await new Promise((res) => setTimeout(res, 50)))
      if (Date.now() - t0 > 30_000 * SLOW) return false;
    return true;
  };
  const t = await s.pty.create({ cols: 100, rows: 30, onData: (d) => { tty += dec.decode(d, { stream: true }); }, ...opts });
  await s.pty.sendInput(t.pid, enc.encode('stty size; tty -s && echo IS_$((6*7))\n'), opts);
  assert(await seen(/30 100\r\n/), `no '30 100' from stty size in the guest's terminal: ${JSON.stringify(tty.slice(-300))}`);
  assert(await seen(/IS_42\r\n/), `stdin is not a terminal, or the input did not run: ${JSON.stringify(tty.slice(-300))}`);
  await s.pty.resize(t.pid, { cols: 120, rows: 40 }, opts);
  await s.pty.sendInput(t.pid, enc.encode('stty size\n'), opts);
  assert(await seen(/40 120\r\n/), `stty size did not follow the resize: ${JSON.stringify(tty.slice(-300))}`);
  const killed = await s.pty.kill(t.pid, opts);
  assert(killed === true, `pty.kill returned ${killed}`);
  await withTimeout(expectReject(t.wait(), (x) => x instanceof CommandExitError, 'wait() after pty.kill'),
    30_000 * SLOW, 'wait() after pty.kill');
  return `pid ${t.pid}`;
});

await check('files makeDir/list/exists/remove', async () => {
  const f = need(a, 'a').files;
  assert(await f.makeDir('/tmp/d1/sub', opts) === true, 'makeDir of a new directory did not return true');
  assert(await f.makeDir('/tmp/d1/sub', opts) === false, 'makeDir of an existing directory did not return false');
  await f.write('/tmp/d1/a.txt', 'AB', opts);
  const l = await f.list('/tmp/d1', opts);
  const names = l.map((e) => `${e.name}:${e.type}`).sort().join(',');
  assert(names === 'a.txt:file,sub:dir', `list gave ${names}`);
  const ent = l.find((e) => e.name === 'a.txt');
  assert(ent.path === '/tmp/d1/a.txt' && ent.size === 2, `entry ${JSON.stringify(ent)}`);
  const deep = await f.list('/tmp', { ...opts, depth: 2 });
  assert(deep.some((e) => e.path === '/tmp/d1/sub'), 'list depth 2 of /tmp has no /tmp/d1/sub');
  assert(await f.exists('/tmp/d1/a.txt', opts) === true, 'exists(a.txt) before remove');
  await f.remove('/tmp/d1/a.txt', opts);
  assert(await f.exists('/tmp/d1/a.txt', opts) === false, 'exists(a.txt) after remove');
  await f.remove('/tmp/d1', opts);
  assert(await f.exists('/tmp/d1', opts) === false, 'exists(/tmp/d1) after removing the tree');
  assert(await f.exists('/no/such/path', opts) === false, 'exists(/no/such/path)');
  await expectReject(f.read('/no/such/file', opts), (x) => x instanceof NotFoundError, 'read of a missing file');
});

// 2. A second sandbox: neither sees the other's files or accepts its token.
await check('create a second sandbox', async () => {
  b = await Sandbox.create(TEMPLATE, { ...opts, timeoutMs: 3600_000 });
  made.push(b.sandboxId);
  assert(b.sandboxId !== need(a, 'a').sandboxId, 'both sandboxes have one id');
  assert(b.envdAccessToken !== a.envdAccessToken, 'both sandboxes have one access token');
  return b.sandboxId;
});

await check('two sandboxes are isolated', async () => {
  const x = need(a, 'a'), y = need(b, 'b');
  await x.files.write('/tmp/secret', 'only-in-a', opts);
  assert(await y.files.exists('/tmp/secret', opts) === false, 'b sees /tmp/secret written in a');
  await y.files.write('/tmp/secret', 'only-in-b', opts);
  const ra = await x.files.read('/tmp/secret', opts), rb = await y.files.read('/tmp/secret', opts);
  assert(ra === 'only-in-a' && rb === 'only-in-b', `a reads ${ra}, b reads ${rb}`);
  const ca = (await x.commands.run('cat /tmp/secret', runOpts)).stdout;
  assert(ca === 'only-in-a', `cat in a gives ${ca}`);
  // b's token with a's id: refused, a's file not given out.
  const st = await envdStat(x.sandboxId, y.envdAccessToken, '/tmp/secret');
  assert(refused(st.status), `Stat of a with b's token: HTTP ${st.status} ${st.body.slice(0, 200)}`);
  const gf = await envdGetFile(x.sandboxId, y.envdAccessToken, '/tmp/secret');
  assert(refused(gf.status) && !gf.body.includes('only-in-a'), `GET /files of a with b's token: HTTP ${gf.status}`);
});

await check('wrong access token refused', async () => {
  const x = need(a, 'a');
  // The right token first, so a refusal below is about the token.
  const ok = await envdStat(x.sandboxId, x.envdAccessToken, '/tmp/secret');
  assert(ok.status === 200 && JSON.parse(ok.body).entry?.path === '/tmp/secret',
    `Stat with the right token: HTTP ${ok.status} ${ok.body.slice(0, 200)}`);
  const bad = await envdStat(x.sandboxId, `${x.envdAccessToken}x`, '/tmp/secret');
  assert(refused(bad.status), `Stat with a wrong token: HTTP ${bad.status} ${bad.body.slice(0, 200)}`);
  const none = await envdStat(x.sandboxId, undefined, '/tmp/secret');
  assert(refused(none.status), `Stat with no token: HTTP ${none.status} ${none.body.slice(0, 200)}`);
  const gf = await envdGetFile(x.sandboxId, 'wrong-token', '/tmp/secret');
  assert(refused(gf.status) && !gf.body.includes('only-in-a'), `GET /files with a wrong token: HTTP ${gf.status}`);
  const other = await envdStat('no-such-sandbox', x.envdAccessToken, '/tmp');
  assert(other.status !== 200, `Stat of an unknown sandbox id: HTTP ${other.status}`);
  // And through the SDK: a Sandbox object with a wrong token is refused.
  const forged = new Sandbox({ sandboxId: x.sandboxId, envdAccessToken: 'wrong-token', envdVersion: '0.5.7', ...opts });
  await expectReject(forged.files.read('/tmp/secret', opts), (e) => !(e instanceof NotFoundError), 'read with a wrong token');
  return `wrong ${bad.status}, none ${none.status}, unknown id ${other.status}`;
});

await check('wrong API key refused', async () => {
  const wrong = { ...opts, apiKey: `${process.env.E2B_API_KEY}-wrong` };
  const e = await expectReject(Sandbox.create(TEMPLATE, wrong), (x) => x instanceof AuthenticationError, 'create with a wrong key')
    .catch(async (err) => {
      // If it was accepted, do not leave the sandbox behind.
      for (const s of await listAll()) if (!made.includes(s.sandboxId)) made.push(s.sandboxId);
      throw err;
    });
  await expectReject(listAll({ apiKey: 'not-the-key' }), (x) => x instanceof AuthenticationError, 'list with a wrong key');
  await expectReject(Sandbox.kill(need(a, 'a').sandboxId, { ...opts, apiKey: 'not-the-key' }),
    (x) => x instanceof AuthenticationError, 'kill with a wrong key');
  assert(await a.commands.run('true', runOpts), 'a died after a kill with a wrong key');
  return e.message.slice(0, 80);
});

await check('Sandbox.list', async () => {
  const all = await listAll();
  for (const s of [need(a, 'a'), need(b, 'b')]) {
    const e = all.find((i) => i.sandboxId === s.sandboxId);
    assert(e, `${s.sandboxId} not listed: ${all.map((i) => i.sandboxId).join(',')}`);
    assert(e.state === 'running', `${s.sandboxId} state ${e.state}`);
    assert(e.templateId !== undefined, `${s.sandboxId} has no templateId`);
  }
  const mine = await listAll({ query: { metadata: { suite: 'moat-e2b-test' } } });
  assert(mine.length === 1 && mine[0].sandboxId === a.sandboxId,
    `metadata filter gave ${mine.map((i) => i.sandboxId).join(',')}`);
  return `${all.length} listed`;
});

// 3. setTimeout: b gets 10 s; checked at the end (the pause below runs meanwhile).
let expiryAt = 0;
const shortMs = 10_000;
await check('setTimeout', async () => {
  await need(b, 'b').setTimeout(shortMs, opts);
  expiryAt = performance.now() + shortMs;
  const r = await b.commands.run('echo still-here', runOpts);   // not gone at once
  assert(r.stdout === 'still-here\n', `stdout ${r.stdout}`);
});

await check('pause and connect keep a file', async () => {
  const x = need(a, 'a');
  await x.files.write('/tmp/keep', 'kept-across-pause', opts);
  assert(await x.pause(opts) === true, 'pause() did not return true');
  const info = await Sandbox.getInfo(x.sandboxId, opts);
  assert(info.state === 'paused', `state after pause: ${info.state}`);
  assert(await x.pause(opts) === false, 'a second pause() did not return false (409)');
  const listed = (await listAll()).find((i) => i.sandboxId === x.sandboxId);
  assert(listed && listed.state === 'paused', `listed as ${listed && listed.state}`);
  const c = await Sandbox.connect(x.sandboxId, opts);
  const kept = await c.files.read('/tmp/keep', opts);
  assert(kept === 'kept-across-pause', `after connect /tmp/keep is ${JSON.stringify(kept)}`);
  assert((await Sandbox.getInfo(x.sandboxId, opts)).state === 'running', 'not running after connect');
  a = c;
});

await check('setTimeout expiry', async () => {
  const y = need(b, 'b');
  assert(expiryAt > 0, 'setTimeout failed');
  const limit = expiryAt + 60_000 * SLOW;
  let gone = false, state = '?';
  while (performance.now() < limit) {
    const e = (await listAll()).find((i) => i.sandboxId === y.sandboxId);
    state = e ? e.state : 'gone';
    if (!e) { gone = true; break; }
    await sleep(1000);
  }
  assert(gone, `still listed (${state}) ${Math.round((performance.now() - expiryAt) / 1000)} s after its timeout`);
  const late = Math.round((performance.now() - expiryAt) / 1000);
  await expectReject(Sandbox.getInfo(y.sandboxId, opts), (x) => x instanceof NotFoundError, 'getInfo of the expired sandbox');
  await expectReject(y.commands.run('true', { ...runOpts, requestTimeoutMs: 10_000 * SLOW }), () => true, 'run in the expired sandbox');
  return `gone ${late} s after the deadline`;
});

await check('kill', async () => {
  const x = need(a, 'a');
  assert(await x.kill(opts) === true, 'kill() did not return true');
  assert(await Sandbox.kill(x.sandboxId, opts) === false, 'a second kill did not return false (404)');
  assert(!(await listAll()).some((i) => i.sandboxId === x.sandboxId), 'still listed after kill');
  await expectReject(x.commands.run('true', { ...runOpts, requestTimeoutMs: 10_000 * SLOW }), () => true, 'run in the killed sandbox');
});

// 4. The egress policy (docs/serve.md Network): SERVE_NET_TARGET=ADDR:PORT
// is an address of this machine's own (the nested L1's loopback), where this
// script listens and counts connections; passt carries the guest's
// connection to it when the sandbox's policy allows it. The address is a
// host address, in moat's preset, so only an explicit allowOut reaches it
// (allow_internet_access alone does not).
const NET = process.env.SERVE_NET_TARGET || '';
if (!NET) {
  console.log('SKIPPED: serve: network checks (SERVE_NET_TARGET not set: passt and an address to reach are set up by tests/nested/checks.d/serve.sh)');
} else {
  const naddr = NET.slice(0, NET.lastIndexOf(':')), nport = Number(NET.slice(NET.lastIndexOf(':') + 1));
  let conns = 0;
  const srv = createServer((q, r) => r.end('moat-net-ok\n'));
  srv.on('connection', () => { conns++; });
  await new Promise((res, rej) => { srv.once('error', rej); srv.listen(nport, naddr, res); });
  const fetchCmd = (t) => `moat-fetch -q -T ${t} -O /tmp/net.out http://${NET}/ && cat /tmp/net.out`;
  let open = null;
  await check('network: allowOut reaches a listener through passt', async () => {
    open = await Sandbox.create(TEMPLATE, { ...opts, allowInternetAccess: false, network: { allowOut: [naddr] } });
    made.push(open.sandboxId);
    const before = conns;
    const r = await open.commands.run(fetchCmd(30), runOpts);
    assert(r.stdout.includes('moat-net-ok'), `fetched ${JSON.stringify(r.stdout)}`);
    assert(conns > before, 'the listener saw no connection');
    const info = await Sandbox.getInfo(open.sandboxId, opts);
    assert(info.allowInternetAccess === false, `allowInternetAccess ${info.allowInternetAccess}`);
    assert(info.network && info.network.allowOut.includes(`${naddr}/32`), `network ${JSON.stringify(info.network)}`);
    return `${conns - before} connection(s)`;
  });
  await check('network: denied without allow_internet_access or allowOut', async () => {
    const shut = await Sandbox.create(TEMPLATE, opts);
    made.push(shut.sandboxId);
    const before = conns;
    const e = await expectReject(shut.commands.run(fetchCmd(8), runOpts), (x) => x instanceof CommandExitError,
      'a fetch with everything denied');
    assert(conns === before, `the listener saw ${conns - before} connection(s)`);
    const info = await Sandbox.getInfo(shut.sandboxId, opts);
    assert(info.allowInternetAccess === false, `allowInternetAccess ${info.allowInternetAccess}`);
    await shut.kill(opts);
    return `moat-fetch exit ${e.exitCode}, no connection`;
  });
  await check('network: allow_internet_access with denyOut (the policy reported, no connection)', async () => {
    const x = await Sandbox.create(TEMPLATE, { ...opts, allowInternetAccess: true, network: { denyOut: [`${naddr}/32`] } });
    made.push(x.sandboxId);
    const info = await Sandbox.getInfo(x.sandboxId, opts);
    assert(info.allowInternetAccess === true, `allowInternetAccess ${info.allowInternetAccess}`);
    // moatNetwork (the policy in force) is moat's own field: the SDK's getInfo drops it
    const raw = await (await fetch(`${process.env.E2B_API_URL.replace(/\/+$/, '')}/sandboxes/${x.sandboxId}`,
      { headers: { 'X-API-KEY': process.env.E2B_API_KEY } })).json();
    assert(/^default allow; deny /.test(raw.moatNetwork), `moatNetwork ${raw.moatNetwork}`);
    const before = conns;
    await expectReject(x.commands.run(fetchCmd(8), runOpts), (e) => e instanceof CommandExitError, 'a denied fetch');
    assert(conns === before, `the listener saw ${conns - before} connection(s)`);
    await x.kill(opts);
  });
  await check('network: the policy is set again after pause and connect', async () => {
    const x = need(open, 'open');
    assert(await x.pause(opts) === true, 'pause() did not return true');
    const c = await Sandbox.connect(x.sandboxId, opts);
    const before = conns;
    const r = await c.commands.run(fetchCmd(30), runOpts);
    assert(r.stdout.includes('moat-net-ok') && conns > before, `after connect: ${JSON.stringify(r.stdout)}`);
    await c.kill(opts);
  });
  await check('network: an overlapping allowOut and denyOut is refused', async () => {
    await expectReject(Sandbox.create(TEMPLATE, { ...opts, network: { allowOut: [naddr], denyOut: [`${naddr}/32`] } }),
      (e) => /overlap/.test(String(e.message)), 'an overlapping create');
  });
  srv.close();
}

// Nothing this run made may outlive it.
for (const id of made) await Sandbox.kill(id, opts).catch(() => {});
const total = Math.round((performance.now() - started) / 1000);
console.log(`serve: e2b ${failures ? `${failures} check(s) FAILED` : 'all checks passed'} in ${total} s`);
process.exit(failures ? 1 : 0);
