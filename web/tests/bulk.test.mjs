// The dashboard's pages for many runs (issue 39 §1, §2, §4) in a real
// browser against a real `flow serve` with the triage quickstart's Tools:
// the replay gate page over stored triage runs (an identical candidate
// passes, a changed one fails with the diverging runs grouped, a broken
// one is refused with its diagnostics), the run list's multi-select
// recovery of faulted runs onto a fixed program (dry run, recovery, the
// forks), and the run diff page of a what-if fork beside its parent.

import {test, before, after, beforeEach} from 'node:test';
import assert from 'node:assert/strict';
import {readFileSync, writeFileSync, rmSync, mkdirSync} from 'node:fs';
import path from 'node:path';
import {api, browser, here, newPage, repo, serve, shotPath, tempDir, until} from './harness.mjs';

const TRIAGE = path.join(repo, 'examples/flows/triage/triage.json');
const RECOVER = path.join(repo, 'tests/fixtures/flows/recover');
const LIMIT = {timeout: 180_000};

let S; // triage Tools bound
let web;
let page;
const made = []; // dirs of the candidate files written for the tests
const triage = {}; // ticket → run id

before(async () => {
  S = await serve({tools: [path.join(repo, 'examples/flows/triage/flow.toml')]});
  web = await browser();
  page = await newPage(web.context);
  // Three triage runs: high (escalated), medium and low (drafted); two
  // answered and completed, the low one left waiting for its review.
  const flow = readFileSync(TRIAGE, 'utf8');
  for (const ticket of ['The site is down!', 'I was charged twice', 'How do I export my data?']) {
    const v = await api(S.base, '/v1/runs', {method: 'POST', body: {flow, name: 'triage.json', input: {ticket, customer: 'Acme'}, wait: 30}});
    assert.equal(v.state, 'paused', JSON.stringify(v));
    triage[ticket] = v.run;
    if (ticket.startsWith('How')) continue;
    const done = await api(S.base, `/v1/runs/${v.run}/resume`, {method: 'POST', body: {call: v.pending[0].call, reply: {Ok: {decision: 'send'}}, wait: 30}});
    assert.equal(done.state, 'completed', JSON.stringify(done));
  }
});

beforeEach(() => { if (page) page.errors(); });

after(async () => {
  if (web) await web.close();
  if (S) {
    await S.stop();
    rmSync(S.data, {recursive: true, force: true});
  }
  for (const d of made) rmSync(d, {recursive: true, force: true});
});

/** Writes `text` as `name` in a fresh dir (the upload takes the file's name as the module's). */
function candidate(name, text) {
  const dir = tempDir('candidate');
  made.push(dir);
  const file = path.join(dir, name);
  writeFileSync(file, text);
  return file;
}

/** Runs the gate on the page with `file` and the filters; waits for the verdict or the refusal. */
async function gate(file, {state = '', q = ''} = {}) {
  await upload('gate', file);
  await page.locator('#gate-f-state').selectOption(state);
  await page.locator('#gate-f-q').fill(q);
  await page.getByRole('button', {name: 'Run gate'}).click();
  await page.locator('.gate-verdict, .refusal, .gate-result p').first().waitFor();
}

/** Chooses `file` in a program field and waits until the page has read it. */
async function upload(id, file) {
  await page.locator(`#${id}-text`).fill('');
  await page.locator(`#${id}-file`).setInputFiles([]);
  await page.locator(`#${id}-file`).setInputFiles(file);
  await until(async () => (await page.locator(`#${id}-text`).inputValue()) === readFileSync(file, 'utf8'), {what: `${file} read`});
}

const counted = async (which) => Number(await page.locator(`.gate-counts dd[data-count="${which}"]`).textContent());

test('the gate page: an identical candidate passes, a changed one fails with its runs grouped, a broken one is refused (issue 39 §1)', LIMIT, async () => {
  await page.goto(`${S.base}/#/`);
  await page.getByRole('link', {name: 'Gate'}).click();
  await page.waitForURL(/#\/gate$/);
  assert.equal(await page.getByRole('link', {name: 'Gate'}).getAttribute('aria-current'), 'page');

  // The recorded program itself: 2 completed runs matched, the paused one
  // incomplete (it passes), nothing diverged; the bar went to 3 of 3.
  await gate(TRIAGE);
  await page.locator('.gate-verdict', {hasText: 'Gate passed'}).waitFor();
  assert.deepEqual([await counted('runs'), await counted('matched'), await counted('incomplete'), await counted('diverged')], [3, 2, 1, 0]);
  assert.equal(await page.locator('#gate-progress').evaluate((b) => [b.value, b.max].join('/')), '3/3');
  assert.equal(await page.locator('.progress-text').textContent(), '3 of 3');
  assert.equal(await page.locator('table.gate-groups tbody tr').count(), 2, 'matched and incomplete');
  const incomplete = page.locator('table.gate-groups tr.group-incomplete a');
  assert.equal(await incomplete.getAttribute('href'), `#/run/${triage['How do I export my data?']}`);

  // A filter: completed runs only.
  await gate(TRIAGE, {state: 'completed'});
  await page.locator('.gate-verdict', {hasText: 'Gate passed'}).waitFor();
  assert.deepEqual([await counted('runs'), await counted('matched'), await counted('incomplete')], [2, 2, 0]);
  // since: in the future selects nothing; a date it cannot read is said.
  await gate(TRIAGE, {q: 'since:2999-01-01'});
  await page.locator('.gate-result', {hasText: 'No run of this flow matches the filters.'}).waitFor();
  await gate(TRIAGE, {q: 'since:someday'});
  await page.locator('.gate-result .form-err', {hasText: 'since: needs a date'}).waitFor();

  // A changed route: severity medium escalates, high is drafted. The high
  // and the medium runs diverge, each at the fact where the route goes
  // elsewhere; the low one is not affected.
  const changed = readFileSync(TRIAGE, 'utf8').replace("$.state.severity == 'high'", "$.state.severity == 'medium'");
  await gate(candidate('triage.json', changed));
  await page.locator('.gate-verdict', {hasText: 'Gate failed: 2 of 3 stored runs'}).waitFor();
  assert.deepEqual([await counted('runs'), await counted('matched'), await counted('incomplete'), await counted('diverged')], [3, 0, 1, 2]);
  const report = await api(S.base, '/v1/gate', {method: 'POST', body: {flow: changed, name: 'triage.json'}});
  const groups = page.locator('table.gate-groups tr.group-diverged');
  assert.equal(await groups.count(), report.groups.filter((g) => g.verdict === 'diverged').length);
  for (const g of report.groups.filter((x) => x.verdict === 'diverged')) {
    const row = page.locator('table.gate-groups tr.group-diverged', {hasText: g.reason});
    assert.match(await row.textContent(), new RegExp(`at fact ${g.fact}`));
    assert.equal(await row.locator('td.num').textContent(), String(g.runs));
    assert.equal(await row.locator('a').getAttribute('href'), `#/run/${g.example}`);
  }
  const diverged = report.results.filter((r) => r.verdict === 'diverged').map((r) => r.run).sort();
  assert.deepEqual(diverged, [triage['The site is down!'], triage['I was charged twice']].sort());
  await page.screenshot({path: shotPath('gate.png'), fullPage: true});

  // A candidate that does not check: refused before any run is read, its
  // diagnostics listed.
  await gate(candidate('triage.json', '{"spec_version": "1.0.0", "id": "support-triage", "nodes": []}'));
  const refused = page.locator('.refusal');
  await refused.waitFor();
  assert.match(await refused.textContent(), /The gate was refused: .*\(422\)/);
  assert.ok(await refused.locator('ul.diagnostics li').count() >= 1, await refused.textContent());
  assert.equal(await page.locator('.gate-verdict').count(), 0);

  // The example link opens the run.
  await gate(candidate('triage.json', changed));
  await page.locator('table.gate-groups tr.group-diverged a').first().click();
  await page.waitForURL(/#\/run\/run-/);
  await page.locator('.tl-row.kind-Start').waitFor();
  assert.deepEqual(page.errors([/status of 422/]), []);
});

test('the run list: faulted runs chosen, a dry run, the recovery, the forks (issue 39 §2)', LIMIT, async () => {
  // Six runs of fault.json: the four with n below 4 fault.
  const flow = readFileSync(path.join(RECOVER, 'fault.json'), 'utf8');
  const faulted = [];
  let completed = null;
  for (let n = 0; n < 6; n++) {
    const v = await api(S.base, '/v1/runs', {method: 'POST', body: {flow, name: 'fault.json', input: {n, small: 'x', big: 7}, wait: 30}});
    if (n < 4) { assert.equal(v.state, 'faulted', JSON.stringify(v)); faulted.push(v.run); } else completed = v.run;
  }
  const ofFlow = async () => (await api(S.base, '/v1/runs?flow=recover-fault&limit=200')).runs.length;

  await page.goto(`${S.base}/#/?q=flow:recover-fault`);
  const rows = page.locator('table.runs tbody tr');
  await until(async () => (await rows.count()) === 6, {what: 'the six runs'});
  // The faulted ones, all shown chosen at once; then a completed one too.
  await page.locator('.state-tabs .tab[data-state="faulted"]').click();
  await until(async () => (await rows.count()) === 4, {what: 'faulted only'});
  await page.getByLabel('Select all shown').check();
  await page.locator('.bulk-bar .chosen', {hasText: '4 selected'}).waitFor();
  await page.locator('.state-tabs .tab[data-state="any"]').click();
  await until(async () => (await rows.count()) === 6, {what: 'all again'});
  assert.equal(await page.getByLabel('Select all shown').evaluate((b) => b.indeterminate), true, 'some shown are chosen');
  await page.getByLabel(`Select ${completed}`).check();
  await page.locator('.bulk-bar .chosen', {hasText: '5 selected'}).waitFor();
  await page.getByRole('button', {name: 'Recover…'}).click();
  const dialog = page.locator('dialog.recover-dialog');
  await dialog.locator('h2', {hasText: 'Recover 5 runs'}).waitFor();
  const lines = dialog.locator('table.recover-runs tbody tr');
  const summary = dialog.locator('.recover-summary');

  // A program no checkpoint fits: each faulted run cannot be recovered,
  // and says why; the completed one is not needed.
  await upload('recover', path.join(RECOVER, 'misfit.json'));
  await dialog.getByRole('button', {name: 'Dry run'}).click();
  await summary.waitFor();
  assert.match(await summary.textContent(), /Dry run over 5 runs: 0 recoverable, 1 not needed, 0 already recovered, 4 cannot be recovered/);
  for (const run of faulted) {
    const line = dialog.locator(`tr[data-run="${run}"]`);
    assert.equal(await line.locator('.badge').textContent(), 'cannot be recovered');
    assert.match(await line.textContent(), /no root Checkpoint before fact \d+ fits the fixed program.*extra/);
  }
  assert.equal(await dialog.getByRole('button', {name: /^Recover \d/}).isHidden(), true, 'nothing to recover');

  // The fixed program: a dry run says from where each fork would start
  // and that no call is made again; nothing is forked.
  await upload('recover', path.join(RECOVER, 'fixed.json'));
  await dialog.getByRole('button', {name: 'Dry run'}).click();
  await summary.filter({hasText: '4 recoverable'}).waitFor();
  assert.match(await summary.textContent(), /Dry run over 5 runs: 4 recoverable, 1 not needed, 0 already recovered, 0 cannot be recovered\. Nothing was forked\./);
  assert.equal(await lines.count(), 5);
  assert.equal(await dialog.locator('.progress-text').textContent(), '5 of 5');
  for (const run of faulted) {
    const line = dialog.locator(`tr[data-run="${run}"]`);
    assert.equal(await line.locator('.badge').textContent(), 'recoverable');
    assert.match(await line.locator('td').nth(2).textContent(), /^checkpoint \d+node small_label$/);
    assert.equal(await line.locator('td').nth(3).textContent(), 'none', 'no call made again');
    assert.match(await line.locator('td').nth(4).textContent(), /diverges at fact \d+/);
  }
  assert.equal(await dialog.locator(`tr[data-run="${completed}"] .badge`).textContent(), 'not needed');
  assert.equal(await ofFlow(), 6, 'the dry run forks nothing');
  // Tall enough for the dialog's table of runs.
  await page.setViewportSize({width: 1280, height: 1200});
  await page.screenshot({path: shotPath('recover.png')});
  await page.setViewportSize({width: 1280, height: 800});

  // The recovery: each faulted run forked, its fork linked.
  await dialog.getByRole('button', {name: 'Recover 4 runs'}).click();
  await summary.filter({hasText: '4 recovered'}).waitFor();
  assert.match(await summary.textContent(), /5 runs: 4 recovered, 1 not needed, 0 already recovered, 0 cannot be recovered; the forks are started/);
  // Recorded: the summary names the recovery, which lists the four forks.
  const recId = (await summary.textContent()).match(/Recorded as recovery (rec-\S+?)\.$/)[1];
  const rec = await api(S.base, `/v1/recoveries/${recId}`);
  assert.equal(rec.forks.length, 4);
  assert.deepEqual(rec.forks.map((f) => f.run).sort(), [...faulted].sort());
  for (const run of faulted) {
    const forks = (await api(S.base, `/v1/runs?fork_of=${run}`)).runs;
    assert.equal(forks.length, 1, `${run}: one fork`);
    const link = dialog.locator(`tr[data-run="${run}"] a.fork-link`);
    assert.equal(await link.getAttribute('href'), `#/run/${forks[0].run}`);
    assert.equal(await dialog.locator(`tr[data-run="${run}"] .badge`).textContent(), 'recovered');
  }
  assert.equal(await ofFlow(), 10);

  // The forks appear in the list, each naming its parent, and complete.
  await dialog.getByRole('button', {name: 'Close'}).click();
  await until(async () => (await rows.count()) === 10, {what: 'the forks listed'});
  for (const run of faulted) {
    const fork = (await api(S.base, `/v1/runs?fork_of=${run}`)).runs[0].run;
    const row = page.locator(`tr[data-run="${fork}"]`);
    assert.match(await row.textContent(), /fork of .* @\d+/);
    await row.locator('.badge', {hasText: 'completed'}).waitFor();
  }
  // A fork's lineage names the recovery that made it.
  const fork = (await api(S.base, `/v1/runs?fork_of=${faulted[0]}`)).runs[0].run;
  await page.goto(`${S.base}/#/run/${fork}`);
  await page.locator('.tree .how', {hasText: `by recovery ${recId}`}).waitFor();
  assert.deepEqual(page.errors(), []);
});

test('the diff page: a what-if fork beside its parent shows the replaced call and what followed (issue 39 §4)', LIMIT, async () => {
  // What if the classifier had said billing, low, for the outage?
  const parent = triage['The site is down!'];
  const fork = (await api(S.base, `/v1/runs/${parent}/fork`, {method: 'POST', body: {call: 'c1:root#1', reply: {Ok: {category: 'billing', severity: 'low'}}, wait: 30}})).run;
  await page.goto(`${S.base}/#/run/${fork}`);
  await page.getByRole('link', {name: 'Diff with parent'}).click();
  await page.waitForURL(new RegExp(`#/diff/${parent}/${fork}$`));
  const d = await api(S.base, `/v1/runs/${parent}/diff/${fork}`);
  assert.equal(d.alignment.kind, 'fork');
  await page.locator('.alignment', {hasText: `B is a fork of A from A's checkpoint at fact ${d.alignment.checkpoint}`}).waitFor();
  assert.match(await page.locator('.diff-verdict').textContent(), new RegExp(`parted at A fact ${d.parted.a} / B fact ${d.parted.b}`));

  // The replaced call: its outcome, field by field, A beside B.
  const call = page.locator('.call-diff[data-index="1"]');
  assert.match(await call.locator('h3').textContent(), /Call 1.*c1:root#1/);
  const field = async (p) => {
    const row = call.locator(`tr[data-path="${p}"]`);
    return [await row.locator('.value-a').textContent(), await row.locator('.value-b').textContent()];
  };
  assert.deepEqual(await field('$.outcome.Ok.category'), ['"outage"', '"billing"']);
  assert.deepEqual(await field('$.outcome.Ok.severity'), ['"high"', '"low"']);
  assert.match(await call.locator('.side-a').textContent(), /triage\.json#classify at classify/);
  // What followed: as many calls and checkpoints as the server lists, the
  // model asked at escalate in A and at draft in B; A ended, B waits.
  assert.equal(await page.locator('.call-diff').count(), d.calls.length);
  assert.equal(await page.locator('.checkpoint-diff').count(), d.checkpoints.length);
  const second = page.locator('.call-diff[data-index="2"] tr[data-path="$.node"]');
  assert.deepEqual([await second.locator('.value-a').textContent(), await second.locator('.value-b').textContent()], ['"escalate"', '"draft"']);
  assert.match(await page.locator('.diff-section .side-a').last().textContent(), /completed at fact \d+/);
  assert.match(await page.locator('.diff-section .side-b').last().textContent(), /not ended/);
  await page.screenshot({path: shotPath('diff.png'), fullPage: true});

  // A run that is not a fork has no such link; two unrelated runs still
  // compare, from Start.
  await page.goto(`${S.base}/#/run/${parent}`);
  await page.getByRole('button', {name: 'Replay'}).waitFor();
  assert.equal(await page.getByRole('link', {name: 'Diff with parent'}).count(), 0);
  await page.goto(`${S.base}/#/diff/${parent}/${triage['I was charged twice']}`);
  await page.locator('.alignment', {hasText: 'Aligned fact by fact from Start.'}).waitFor();
  await page.locator('.diff-section', {hasText: 'Input'}).locator('tr[data-path="$.input.ticket"]').waitFor();
  assert.deepEqual(page.errors(), []);
});

test('phone width: the gate, the recovery dialog and the diff page fit, every control named', LIMIT, async () => {
  const phone = await newPage(web.context, {viewport: {width: 390, height: 844}});
  const parent = triage['The site is down!'];
  const fork = (await api(S.base, `/v1/runs?fork_of=${parent}`)).runs[0].run;
  const pages = [
    ['#/gate', async () => phone.getByRole('button', {name: 'Run gate'}).waitFor()],
    ['#/', async () => {
      await phone.locator('table.runs tbody tr').first().waitFor();
      await phone.getByLabel('Select all shown').check();
      await phone.getByRole('button', {name: 'Recover…'}).click();
      await phone.locator('dialog.recover-dialog').waitFor();
    }],
    [`#/diff/${parent}/${fork}`, async () => phone.locator('.call-diff').first().waitFor()],
  ];
  for (const [hash, ready] of pages) {
    await phone.goto(`${S.base}/${hash}`);
    await ready();
    const [sw, cw] = await phone.evaluate(() => [document.documentElement.scrollWidth, document.documentElement.clientWidth]);
    assert.ok(sw <= cw + 1, `${hash}: no sideways scrolling at phone width (${sw} > ${cw})`);
    const unnamed = await phone.evaluate(() => [...document.querySelectorAll('input, select, textarea, button')]
      .filter((el) => !el.closest('[hidden]') && !(el.labels && el.labels.length) && !el.getAttribute('aria-label') && !(el.textContent || '').trim())
      .map((el) => el.outerHTML.slice(0, 80)));
    assert.deepEqual(unnamed, [], hash);
  }
  assert.deepEqual(phone.errors(), []);
  await phone.close();
});

test('measure: the gate page over 200 stored runs, a dry run over 100 chosen runs, beside the same requests without a page', {timeout: 300_000}, async () => {
  // A flow of its own (fault.json under another id): 200 runs, half faulted.
  const faultDoc = readFileSync(path.join(RECOVER, 'fault.json'), 'utf8').replace('"recover-fault"', '"measure-fault"');
  const fixedDoc = readFileSync(path.join(RECOVER, 'fixed.json'), 'utf8').replace('"recover-fault"', '"measure-fault"');
  const faulted = [];
  for (let i = 0; i < 200; i++) {
    const v = await api(S.base, '/v1/runs', {method: 'POST', body: {flow: faultDoc, name: 'fault.json', input: {n: i % 8, small: 'x', big: 7}, wait: 30}});
    if (v.state === 'faulted') faulted.push(v.run);
  }
  assert.equal(faulted.length, 100);
  const timed = async (f) => { const t = performance.now(); await f(); return Math.round(performance.now() - t); };

  // The gate: the page (click to verdict, the NDJSON read as it streams)
  // beside POST /v1/gate answered whole.
  // Each measured with the stream read by node before and after the page
  // (the store's caches are as warm for the page as for the second).
  const streamed = (p, body) => timed(async () => {
    const r = await fetch(`${S.base}${p}`, {method: 'POST', headers: {'Content-Type': 'application/json', Accept: 'application/x-ndjson'}, body: JSON.stringify(body)});
    assert.match(await r.text(), /"report"/);
  });
  const gateBody = {flow: faultDoc, name: 'fault.json'};
  const gateApiBefore = await streamed('/v1/gate', gateBody);
  await page.goto(`${S.base}/#/gate`);
  await page.locator('#gate-text').fill(faultDoc);
  const gatePage = await timed(async () => {
    await page.getByRole('button', {name: 'Run gate'}).click();
    await page.locator('.gate-verdict').waitFor();
  });
  assert.equal(await counted('runs'), 200);
  const gateApiAfter = await streamed('/v1/gate', gateBody);

  // The dry run of the 100 faulted runs chosen on the run list.
  await page.goto(`${S.base}/#/?q=flow:measure-fault&state=faulted`);
  const rows = page.locator('table.runs tbody tr');
  await until(async () => (await rows.count()) === 50, {what: 'the first page'});
  await page.getByRole('button', {name: 'Load older runs'}).click();
  await until(async () => (await rows.count()) === 100, {what: 'every faulted run shown'});
  await page.getByLabel('Select all shown').check();
  await page.getByRole('button', {name: 'Recover…'}).click();
  const dialog = page.locator('dialog.recover-dialog');
  await dialog.locator('#recover-text').fill(fixedDoc);
  await dialog.locator('#recover-name').fill('fault.json');
  const dryBody = {flow: fixedDoc, name: 'fault.json', dryRun: true, runs: faulted};
  const dryApiBefore = await streamed('/v1/recover', dryBody);
  const dryPage = await timed(async () => {
    await dialog.getByRole('button', {name: 'Dry run'}).click();
    await dialog.locator('.recover-summary').waitFor();
  });
  assert.match(await dialog.locator('.recover-summary').textContent(), /100 recoverable/);
  const dryApiAfter = await streamed('/v1/recover', dryBody);
  await dialog.getByRole('button', {name: 'Close'}).click();

  const result = {
    gateRuns: 200, gatePageMs: gatePage, gateStreamMs: [gateApiBefore, gateApiAfter],
    dryRunRuns: 100, dryRunPageMs: dryPage, dryRunStreamMs: [dryApiBefore, dryApiAfter],
  };
  mkdirSync(path.join(here, 'out'), {recursive: true});
  writeFileSync(path.join(here, 'out/measure-bulk.json'), `${JSON.stringify(result, null, 2)}\n`);
  console.log(`# measure ${JSON.stringify(result)}`);
  assert.deepEqual(page.errors(), []);
});
