// The e2b JavaScript SDK against moat serve's envd server on its own
// (tests/integration/serve-envd-sdk.sh starts it with two guest agents on
// the host). Sandbox objects are built with sandboxUrl pointing at the
// server, as the SDK does after Sandbox.create/connect; nothing here needs
// the REST API or a VM. One PASS:/FAIL: line a check; exit 1 on a failure.
//
// Env: E2B_SDK (the e2b package's directory), ENVD_URL, TESTDIR.
import crypto from 'node:crypto';
import { execFileSync } from 'node:child_process';

const e2b = await import(`${process.env.E2B_SDK}/dist/index.mjs`);
const { Sandbox, CommandExitError, FileNotFoundError, AuthenticationError, SandboxNotFoundError, TimeoutError } = e2b;
const url = process.env.ENVD_URL, dir = process.env.TESTDIR;
const mk = (id, token) => new Sandbox({ sandboxId: id, envdAccessToken: token, envdVersion: '0.5.7', sandboxUrl: url, apiKey: 'unused' });
const a = mk('sbx-a', 'tok-a'), b = mk('sbx-b', 'tok-b');
let fails = 0;
const ok = (c, m) => { console.log(`${c ? 'PASS' : 'FAIL'}: serve-envd-sdk: ${m}`); if (!c) fails++; };
const sha = (d) => crypto.createHash('sha256').update(d).digest('hex');
const throws = async (f, cls, m) => {
  try { await f(); ok(false, `${m}: did not throw`); } catch (e) { ok(!cls || e instanceof cls, `${m} (${e.name}: ${e.message.slice(0, 80)})`); }
};

try {
  const r = await a.commands.run('echo hi; echo $SANDBOX_NAME');
  ok(r.exitCode === 0 && r.stdout === 'hi\na\n', 'commands.run: stdout, exit code, envVars');
  await throws(() => a.commands.run('echo bad >&2; exit 3'), CommandExitError, 'non-zero exit is CommandExitError');
  try { await a.commands.run('exit 7'); } catch (e) { ok(e.exitCode === 7, 'CommandExitError.exitCode'); }
  const chunks = [];
  await a.commands.run('for i in 1 2 3; do echo $i; sleep 0.2; done', { onStdout: (d) => chunks.push(d) });
  ok(chunks.join('') === '1\n2\n3\n' && chunks.length >= 2, 'onStdout streams the output as it comes');
  const h = await a.commands.run('sleep 30', { background: true });
  ok((await a.commands.list()).some((p) => p.pid === h.pid && p.cmd === '/bin/bash'), 'background command in commands.list');
  ok(!(await b.commands.list()).some((p) => p.pid === h.pid), "another sandbox's list does not show it");
  ok(await b.commands.kill(h.pid) === false, 'another sandbox cannot kill it');
  ok(await h.kill() === true, 'kill');
  try { await h.wait(); ok(false, 'killed command ended well'); } catch (e) { ok(e instanceof CommandExitError && e.exitCode === -1, 'killed command: CommandExitError, exit code -1'); }
  ok(await a.commands.kill(h.pid) === false, 'killing it again returns false');
  const c = await a.commands.run('cat', { background: true, stdin: true });
  await a.commands.sendStdin(c.pid, 'abc\n');
  await a.commands.closeStdin(c.pid);
  ok((await c.wait()).stdout === 'abc\n', 'sendStdin + closeStdin');
  const bg = await a.commands.run('sleep 1; echo after', { background: true });
  await bg.disconnect();
  ok((await (await a.commands.connect(bg.pid)).wait()).stdout === 'after\n', 'disconnect, then commands.connect');
  await throws(() => a.commands.run('sleep 5', { timeoutMs: 1000 }), TimeoutError, 'timeoutMs ends the command');
  await new Promise((res) => setTimeout(res, 500));
  ok((await a.commands.list()).length === 0, 'no process left running');

  const data = crypto.randomBytes(1 << 20);
  const w = await a.files.write(`${dir}/a/b/big.bin`, data);
  ok(w.path === `${dir}/a/b/big.bin` && w.name === 'big.bin' && w.type === 'file', 'files.write (multipart) info');
  ok(sha(await a.files.read(`${dir}/a/b/big.bin`, { format: 'bytes' })) === sha(data), '1 MiB multipart write + read: same sha256');
  await a.files.write(`${dir}/a/b/big2.bin`, new Blob([data]).stream(), { useOctetStream: true });
  ok(sha(await a.files.read(`${dir}/a/b/big2.bin`, { format: 'bytes' })) === sha(data), '1 MiB streamed octet-stream write + read: same sha256');
  const multi = await a.files.write([{ path: `${dir}/m1.txt`, data: 'one' }, { path: `${dir}/m2.txt`, data: 'two' }]);
  ok(multi.length === 2 && (await a.files.read(`${dir}/m1.txt`)) === 'one' && (await a.files.read(`${dir}/m2.txt`)) === 'two', 'writeFiles: two files in one form');
  // gzip: true uploads Content-Encoding: gzip (octet-stream at 0.5.7) and
  // reads with Accept-Encoding: gzip (answered uncompressed).
  const gz = Buffer.concat([crypto.randomBytes(1 << 19), Buffer.alloc(1 << 19, 97)]);
  await a.files.write(`${dir}/gz.bin`, gz, { gzip: true });
  ok(sha(await a.files.read(`${dir}/gz.bin`, { format: 'bytes', gzip: true })) === sha(gz), '1 MiB gzip write + gzip read: same sha256');
  await a.files.write(`${dir}/gz2.bin`, new Blob([gz]).stream(), { gzip: true });
  ok(sha(await a.files.read(`${dir}/gz2.bin`, { format: 'bytes' })) === sha(gz), '1 MiB streamed gzip write: same sha256');
  await a.files.write(`${dir}/gz.txt`, 'zipped text', { gzip: true });
  ok((await a.files.read(`${dir}/gz.txt`, { gzip: true })) === 'zipped text', 'gzip text write + read');
  await a.files.write(`${dir}/empty`, '');
  ok((await a.files.read(`${dir}/empty`)) === '', 'empty file');
  let txt = '';
  for await (const ch of await a.files.read(`${dir}/m2.txt`, { format: 'stream' })) txt += Buffer.from(ch).toString();
  ok(txt === 'two', 'read as a stream');
  ok(await a.files.makeDir(`${dir}/d1/d2`) === true && await a.files.makeDir(`${dir}/d1/d2`) === false, 'makeDir: true, then false');
  const ls = await a.files.list(`${dir}/a`, { depth: 2 });
  ok(ls.length === 3 && ls.some((e) => e.name === 'big.bin' && e.type === 'file' && e.size === (1 << 20) && e.permissions === '-rw-r--r--')
     && ls.some((e) => e.name === 'b' && e.type === 'dir'), 'files.list with depth 2: names, types, sizes, permissions');
  const info = await a.files.getInfo(`${dir}/a/b/big.bin`);
  ok(info.size === (1 << 20) && info.modifiedTime instanceof Date && Math.abs(info.modifiedTime - Date.now()) < 600000, 'getInfo: size, modifiedTime');
  ok(await a.files.exists(`${dir}/nope`) === false && await a.files.exists(`${dir}/a`) === true, 'exists');
  ok((await a.files.rename(`${dir}/m1.txt`, `${dir}/moved/m1.txt`)).path === `${dir}/moved/m1.txt`, 'rename into a new directory');
  await a.files.remove(`${dir}/a`);
  ok(await a.files.exists(`${dir}/a`) === false, 'remove a tree');
  await throws(() => a.files.read(`${dir}/nope`), FileNotFoundError, 'reading a missing file is FileNotFoundError');
  // watchDir: recursive, events as envd names them (relative to the
  // watched directory), through the agent's WATCH.
  const wd = `${dir}/w`, evs = [];
  await a.files.makeDir(`${wd}/sub`);
  const until = async (want) => {
    for (let t0 = Date.now(); !want.every((x) => evs.includes(x)); await new Promise((res) => setTimeout(res, 50)))
      if (Date.now() - t0 > 10000) return false;
    return true;
  };
  const wh = await a.files.watchDir(wd, (e) => evs.push(`${e.type}:${e.name}`), { recursive: true });
  await a.files.write(`${wd}/f.txt`, 'x');
  ok(await until(['create:f.txt', 'write:f.txt']), `watchDir: create and write (${evs.join(' ')})`);
  await a.files.rename(`${wd}/f.txt`, `${wd}/sub/g.txt`);
  await a.commands.run(`chmod 600 ${wd}/sub/g.txt`);
  ok(await until(['rename:f.txt', 'create:sub/g.txt', 'chmod:sub/g.txt']), `watchDir: rename and chmod in a subdirectory (${evs.join(' ')})`);
  await a.files.makeDir(`${wd}/new`);
  ok(await until(['create:new']), 'watchDir: a new directory');
  await a.files.write(`${wd}/new/h.txt`, 'h');
  await a.files.remove(`${wd}/sub/g.txt`);
  ok(await until(['create:new/h.txt', 'remove:sub/g.txt']), `watchDir: a file in the new directory, remove (${evs.join(' ')})`);
  await wh.stop();
  const n0 = evs.length;
  await a.files.write(`${wd}/after.txt`, 'late');
  await new Promise((res) => setTimeout(res, 300));
  ok(evs.length === n0, 'watchDir: nothing after stop');
  const flat = [];
  const wf = await a.files.watchDir(wd, (e) => flat.push(`${e.type}:${e.name}`), { recursive: false });
  await a.files.write(`${wd}/new/deep.txt`, 'd');
  await a.files.write(`${wd}/top.txt`, 't');
  for (let t0 = Date.now(); !flat.includes('create:top.txt') && Date.now() - t0 < 10000;) await new Promise((res) => setTimeout(res, 50));
  ok(flat.includes('create:top.txt') && !flat.some((x) => x.includes('deep')), `watchDir without recursive: the directory only (${flat.join(' ')})`);
  await wf.stop();
  await throws(() => a.files.watchDir(`${dir}/nope`, () => {}), null, 'watchDir of a missing directory is refused');
  // Signed URLs (uploadUrl/downloadUrl): curl with no token header; the
  // sandbox is the one whose token signs the URL.
  const curl = (args) => { try { return execFileSync('curl', ['-s', '-w', '\n%{http_code}', ...args]).toString(); } catch (e) { return `curl failed: ${e.message}`; } };
  const code = (out) => out.slice(out.lastIndexOf('\n') + 1);
  await a.files.write(`${dir}/up.txt`, 'placeholder');
  const up = await a.uploadUrl(`${dir}/signed/up.txt`, { useSignatureExpiration: 120 });
  ok(/signature=v1_[A-Za-z0-9+/]{43}(&|$)/.test(decodeURIComponent(up)) && up.includes('signature_expiration='), 'uploadUrl carries a v1_ signature and its expiration');
  const upOut = curl(['-F', `file=@${dir}/up.txt`, up]);
  ok(code(upOut) === '200' && (await a.files.read(`${dir}/signed/up.txt`)) === 'placeholder', `signed upload with curl (${upOut.replace(/\n/g, ' ')})`);
  const down = await a.downloadUrl(`${dir}/signed/up.txt`);
  const downOut = curl([down]);
  ok(downOut === 'placeholder\n200', `signed download with curl, no expiration (${downOut.replace(/\n/g, ' ')})`);
  const old = await a.downloadUrl(`${dir}/signed/up.txt`, { useSignatureExpiration: -10 });
  ok(code(curl([old])) === '401', 'an expired signature is refused 401');
  const wrong = new URL(down);
  wrong.searchParams.set('signature', wrong.searchParams.get('signature').replace(/.$/, (ch) => (ch === 'A' ? 'B' : 'A')));
  ok(code(curl([wrong.toString()])) === '401', 'a wrong signature is refused 401');
  const other = new URL(down);
  other.searchParams.set('path', `${dir}/m2.txt`);
  ok(code(curl([other.toString()])) === '401', 'a signature for another path is refused 401');
  const bare = curl([(await a.downloadUrl(`${dir}/signed/up.txt`)).replace(/signature=[^&]*/, 'x=1')]);
  ok(/^4\d\d$/.test(code(bare)) && !bare.includes('placeholder'), `no signature, no token, no sandbox id: refused (${code(bare)})`);
  const bs = await b.downloadUrl(`${dir}/signed/up.txt`);
  ok(code(curl([bs])) === '200', "another sandbox's signed URL works with its own token");
  let tty = '';
  const dec = new TextDecoder(), enc = new TextEncoder();
  const seen = async (re) => {
    for (let t0 = Date.now(); !re.test(tty); await new Promise((res) => setTimeout(res, 50)))
      if (Date.now() - t0 > 15000) return false;
    return true;
  };
  const t = await a.pty.create({ cols: 100, rows: 30, onData: (d) => { tty += dec.decode(d, { stream: true }); } });
  await a.pty.sendInput(t.pid, enc.encode('stty size; tty -s && echo IS_$((6*7)) $TERM\n'));
  const ran = await seen(/30 100\r\n/) && await seen(/IS_42 xterm-256color\r\n/);
  ok(ran, `pty.create + sendInput: a terminal of the size given, TERM, input run${ran ? '' : ` (got ${JSON.stringify(tty.slice(-200))})`}`);
  ok(/stty size; tty -s/.test(tty), 'pty: the terminal echoes the input (onData)');
  await a.pty.resize(t.pid, { cols: 120, rows: 40 });
  await a.pty.sendInput(t.pid, enc.encode('stty size\n'));
  ok(await seen(/40 120\r\n/), 'pty.resize: stty size follows');
  ok(await a.pty.kill(t.pid) === true, 'pty.kill');
  try { await t.wait(); ok(false, 'killed pty ended well'); } catch (e) { ok(e instanceof CommandExitError && e.exitCode === -1, 'killed pty: CommandExitError, exit code -1'); }
  ok(await a.pty.kill(t.pid) === false, 'pty.kill again returns false');

  const bad = mk('sbx-a', 'tok-b');
  await throws(() => bad.commands.run('true'), AuthenticationError, "another sandbox's token: run");
  await throws(() => bad.files.read(`${dir}/m2.txt`), AuthenticationError, "another sandbox's token: read");
  await throws(() => bad.files.list(dir), AuthenticationError, "another sandbox's token: list");
  ok(await a.isRunning() === true, 'isRunning');
  const gone = mk('sbx-gone', 'tok-a');
  await throws(() => gone.commands.run('true'), SandboxNotFoundError, 'unknown sandbox: run');
  await throws(() => gone.files.read('/etc/hostname'), TimeoutError, 'unknown sandbox: read');
  ok(await gone.isRunning() === false, 'unknown sandbox: isRunning false');
} catch (e) {
  ok(false, `unexpected: ${e.stack}`);
}
process.exit(fails ? 1 : 0);
