// Test harness for the dashboard's browser tests: real `flow serve`
// processes on 127.0.0.1:0 with temp stores, and Debian's chromium driven
// by playwright-core (a test tool's own browser download does not work
// here). Every process started here is ended by its pid.

import {spawn, execFileSync} from 'node:child_process';
import {mkdtempSync, cpSync, writeFileSync, existsSync, rmSync, mkdirSync} from 'node:fs';
import {tmpdir} from 'node:os';
import path from 'node:path';
import {fileURLToPath} from 'node:url';
import {chromium} from 'playwright-core';

export const here = path.dirname(fileURLToPath(import.meta.url));
export const repo = path.resolve(here, '../..');
export const binDir = process.env.FLOW_BIN_DIR || path.join(process.env.CARGO_TARGET_DIR || path.join(repo, 'target'), 'debug');
export const flowBin = path.join(binDir, 'flow');

const started = new Set();
function cleanup() {
  for (const p of started) {
    try { process.kill(p.pid, 'SIGKILL'); } catch { /* gone */ }
  }
}
process.on('exit', cleanup);
for (const sig of ['SIGINT', 'SIGTERM']) process.on(sig, () => { cleanup(); process.exit(1); });

export function tempDir(name) {
  return mkdtempSync(path.join(tmpdir(), `flowd-web-${name}-`));
}

/**
 * The counter-loop fixture in a temp dir, with the `flow tools` document
 * its Tool process answers describe from (made now, so it always matches).
 */
export function loopFixture() {
  const dir = tempDir('loop');
  cpSync(path.join(here, 'fixtures/loop'), dir, {recursive: true});
  const doc = execFileSync(flowBin, ['--json', 'tools', path.join(dir, 'loop.json')]);
  writeFileSync(path.join(dir, 'tools.json'), doc);
  return dir;
}

/**
 * Starts `flow serve` (flow-llm is found on PATH beside `flow`) and reads
 * the address from its first line. Options: tools (flow.toml paths), env,
 * data (a store dir), listen.
 */
export async function serve({tools = [], env = {}, data = tempDir('data'), listen = '127.0.0.1:0'} = {}) {
  if (!existsSync(flowBin)) throw new Error(`${flowBin} is missing: cargo build -p flowd --bin flow -p flow-tools --bin flow-llm`);
  const args = ['--data', data, 'serve', '--listen', listen];
  for (const t of tools) args.push('--tools', t);
  const proc = spawn(flowBin, args, {
    env: {...process.env, PATH: `${binDir}:${process.env.PATH}`, FLOW_LOG: process.env.FLOW_LOG || 'warn', ...env},
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  started.add(proc);
  let out = '';
  let err = '';
  proc.stderr.on('data', (b) => { err += b; if (err.length > 100_000) err = err.slice(-50_000); });
  const base = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`flow serve did not start: ${err}`)), 20_000);
    proc.stdout.on('data', (b) => {
      out += b;
      const m = /listening on (http:\/\/[0-9.:]+)/.exec(out);
      if (m) { clearTimeout(timer); resolve(m[1]); }
    });
    proc.on('exit', (code) => { clearTimeout(timer); reject(new Error(`flow serve exited ${code}: ${err}`)); });
  });
  return {
    base,
    data,
    proc,
    stdout: () => out,
    stderr: () => err,
    /** SIGTERM, then SIGKILL after 10 s. */
    async stop(signal = 'SIGTERM') {
      if (proc.exitCode !== null || proc.signalCode !== null) return;
      const gone = new Promise((r) => proc.once('exit', r));
      proc.kill(signal);
      const t = setTimeout(() => proc.kill('SIGKILL'), 10_000);
      await gone;
      clearTimeout(t);
      started.delete(proc);
    },
  };
}

/** A JSON request to a server (for setup and checks, not for what the page does). */
export async function api(base, p, {method = 'GET', body} = {}) {
  const r = await fetch(`${base}${p}`, {
    method,
    headers: body === undefined ? {} : {'Content-Type': 'application/json'},
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await r.text();
  let v = text;
  try { v = JSON.parse(text); } catch { /* text */ }
  if (!r.ok) throw new Error(`${method} ${p}: ${r.status} ${text}`);
  return v;
}

/** Polls `f` until it returns a truthy value (bounded). */
export async function until(f, {timeout = 30_000, every = 100, what = 'condition'} = {}) {
  const end = Date.now() + timeout;
  for (;;) {
    const v = await f();
    if (v) return v;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, every));
  }
}

/** Debian's chromium with a fresh profile, headless. */
export async function browser() {
  const profile = tempDir('profile');
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
    headless: true,
    args: [
      '--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
      '--disable-background-networking', '--disable-component-update', '--disable-sync',
    ],
    viewport: {width: 1280, height: 800},
    acceptDownloads: true,
  });
  return {
    context,
    async close() {
      await context.close();
      rmSync(profile, {recursive: true, force: true});
    },
  };
}

/**
 * A new page that records console errors and page errors; `errors()`
 * takes the ones recorded so far, less the ones `allow` (regexps) expects.
 */
export async function newPage(context, {viewport} = {}) {
  const page = await context.newPage();
  if (viewport) await page.setViewportSize(viewport);
  const errors = [];
  page.on('console', (m) => { if (m.type() === 'error') errors.push(m.text()); });
  page.on('pageerror', (e) => errors.push(`pageerror: ${e.message}`));
  // Taken, not just read: each test sees only its own.
  page.errors = (allow = []) => errors.splice(0).filter((e) => !allow.some((re) => re.test(e)));
  return page;
}

/** Where screenshots go: docs/img with UPDATE_SCREENSHOTS=1, else web/tests/out. */
export function shotPath(name) {
  const dir = process.env.UPDATE_SCREENSHOTS ? path.join(repo, 'docs/img') : path.join(here, 'out');
  mkdirSync(dir, {recursive: true});
  return path.join(dir, name);
}
