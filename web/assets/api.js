// The public HTTP API, and nothing else: JSON requests with the session's
// bearer token, problem+json errors, and Server-Sent Events read with
// fetch (EventSource cannot send an Authorization header) with
// reconnection and Last-Event-ID.

const KEY = 'flowd.token';

export function token() {
  return sessionStorage.getItem(KEY) || '';
}

export function setToken(t) {
  if (t) sessionStorage.setItem(KEY, t);
  else sessionStorage.removeItem(KEY);
}

/** A failed request: HTTP status and the problem document. */
export class ApiError extends Error {
  constructor(status, problem) {
    super((problem && problem.detail) || `HTTP ${status}`);
    this.status = status;
    this.problem = problem || {status, title: `HTTP ${status}`, detail: ''};
  }
}

function headers(extra) {
  const h = {...extra};
  const t = token();
  if (t) h.Authorization = `Bearer ${t}`;
  return h;
}

/** Listeners for 401/403 answers: the app asks for a token. */
const authListeners = new Set();
export function onAuthNeeded(f) { authListeners.add(f); }

async function fail(r) {
  let problem = null;
  try { problem = await r.json(); } catch { /* not JSON */ }
  if (r.status === 401 || r.status === 403) for (const f of authListeners) f(problem);
  throw new ApiError(r.status, problem);
}

/** A JSON request. `body` is sent as JSON unless it is a Blob. */
export async function api(path, {method = 'GET', body, signal} = {}) {
  const init = {method, signal, headers: headers({Accept: 'application/json'})};
  if (body instanceof Blob) {
    init.body = body;
    init.headers['Content-Type'] = body.type || 'application/octet-stream';
  } else if (body !== undefined) {
    init.body = JSON.stringify(body);
    init.headers['Content-Type'] = 'application/json';
  }
  const r = await fetch(path, init);
  if (!r.ok) await fail(r);
  const text = await r.text();
  return text ? JSON.parse(text) : null;
}

/**
 * A POST whose answer streams as NDJSON (`Accept: application/x-ndjson`:
 * the gate's and the recovery's progress, one JSON object a line), each
 * line handed to `onLine` as it arrives. A refusal before the first line
 * is thrown as an ApiError, as `api` throws it.
 */
export async function lines(path, {body, onLine, signal}) {
  const init = {method: 'POST', signal, headers: headers({Accept: 'application/x-ndjson', 'Content-Type': 'application/json'})};
  init.body = JSON.stringify(body);
  const r = await fetch(path, init);
  if (!r.ok) await fail(r);
  const reader = r.body.getReader();
  const dec = new TextDecoder();
  let buf = '';
  const emit = (text) => { if (text.trim()) onLine(JSON.parse(text)); };
  for (;;) {
    const {value, done} = await reader.read();
    if (done) break;
    buf += dec.decode(value, {stream: true});
    let at;
    while ((at = buf.indexOf('\n')) >= 0) {
      emit(buf.slice(0, at));
      buf = buf.slice(at + 1);
    }
  }
  emit(buf + dec.decode());
}

/** A body as text, exactly as sent (recorded sources). */
export async function apiText(path) {
  const r = await fetch(path, {headers: headers({})});
  if (!r.ok) await fail(r);
  return r.text();
}

/** Bytes (a blob) from the API. */
export async function apiBlob(path, {signal} = {}) {
  const r = await fetch(path, {headers: headers({}), signal});
  if (!r.ok) await fail(r);
  return r.blob();
}

/**
 * An SSE stream read with fetch. `onEvent({event, id, data})` for each
 * event; `onStatus(s, {attempt, lastId, error})` with 'connecting',
 * 'live', 'reconnecting' (after a drop), 'ended', 'error' (a refusal, or an
 * `error` event: the stored history does not read on). It reconnects after a drop,
 * sending the last id it saw as Last-Event-ID, unless `done()` says the
 * stream is complete. `close()` stops it.
 */
export function stream(path, {onEvent, onStatus = () => {}, lastId = null, done = () => false}) {
  const ctl = {closed: false, abort: null, lastId, attempts: 0};
  const info = (error) => ({attempt: ctl.attempts, lastId: ctl.lastId, error});
  const run = async () => {
    while (!ctl.closed) {
      const ac = new AbortController();
      ctl.abort = ac;
      if (!ctl.attempts) onStatus('connecting', info());
      try {
        const h = headers({Accept: 'text/event-stream'});
        if (ctl.lastId !== null && ctl.lastId !== undefined) h['Last-Event-ID'] = String(ctl.lastId);
        const r = await fetch(path, {headers: h, signal: ac.signal, cache: 'no-store'});
        if (!r.ok) {
          // A refusal is not a network drop: do not retry it.
          let problem = null;
          try { problem = await r.json(); } catch { /* not JSON */ }
          if (r.status === 401 || r.status === 403) for (const f of authListeners) f(problem);
          onStatus('error', info(new ApiError(r.status, problem)));
          return;
        }
        onStatus('live', info());
        ctl.attempts = 0;
        let failure = null;
        await readEvents(r.body, (e) => {
          // `event: error` is the server saying the history does not read
          // on (a storage failure): shown, never reconnected to.
          if (e.event === 'error') {
            try { failure = JSON.parse(e.data); } catch { failure = {detail: e.data}; }
            return;
          }
          if (e.id !== null) ctl.lastId = e.id;
          onEvent(e);
        });
        if (failure) {
          onStatus('error', info(new ApiError(503, {status: 503, title: 'Storage failure', detail: failure.detail || ''})));
          return;
        }
      } catch (e) {
        if (ctl.closed) return;
        // A network error: fall through to reconnect.
      }
      if (ctl.closed) return;
      if (done()) {
        onStatus('ended', info());
        return;
      }
      ctl.attempts += 1;
      onStatus('reconnecting', info());
      await sleep(Math.min(5000, 300 * 2 ** Math.min(ctl.attempts - 1, 4)));
    }
  };
  run();
  return {
    close() {
      ctl.closed = true;
      if (ctl.abort) ctl.abort.abort();
    },
    get lastId() { return ctl.lastId; },
  };
}

function sleep(ms) {
  return new Promise((r) => setTimeout(r, ms));
}

/** Parses an event-stream body (WHATWG SSE rules for the fields we use). */
async function readEvents(body, emit) {
  const reader = body.getReader();
  const dec = new TextDecoder();
  let buf = '';
  let ev = {event: 'message', id: null, data: []};
  for (;;) {
    const {value, done} = await reader.read();
    if (done) break;
    buf += dec.decode(value, {stream: true});
    let at;
    while ((at = buf.indexOf('\n')) >= 0) {
      let line = buf.slice(0, at);
      buf = buf.slice(at + 1);
      if (line.endsWith('\r')) line = line.slice(0, -1);
      if (line === '') {
        if (ev.data.length) emit({event: ev.event, id: ev.id, data: ev.data.join('\n')});
        ev = {event: 'message', id: null, data: []};
        continue;
      }
      if (line.startsWith(':')) continue;
      const c = line.indexOf(':');
      const field = c < 0 ? line : line.slice(0, c);
      let v = c < 0 ? '' : line.slice(c + 1);
      if (v.startsWith(' ')) v = v.slice(1);
      if (field === 'data') ev.data.push(v);
      else if (field === 'event') ev.event = v;
      else if (field === 'id') ev.id = v;
    }
  }
}
