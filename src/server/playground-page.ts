// The playground page (GET /playground): one self-contained HTML page, no external assets. Its script and
// style are served under a Content-Security-Policy that allows exactly these two texts, by hash (playground.ts).

export const PLAYGROUND_STYLE = `
*{box-sizing:border-box}
body{margin:0;font:14px/1.45 system-ui,-apple-system,Segoe UI,sans-serif;color:#1d2330;background:#f4f5f8}
header{display:flex;gap:12px;align-items:end;flex-wrap:wrap;padding:12px 16px;background:#1d2330;color:#fff}
header h1{font-size:16px;margin:0 12px 6px 0}
label{display:flex;flex-direction:column;font-size:12px;gap:2px}
input,textarea{font:inherit;padding:6px 8px;border:1px solid #c5cad6;border-radius:6px;background:#fff;color:#1d2330}
button{font:inherit;padding:6px 14px;border:0;border-radius:6px;background:#3758f9;color:#fff;cursor:pointer}
button:disabled{background:#9aa6d8;cursor:default}
main{display:grid;grid-template-columns:minmax(0,3fr) minmax(0,2fr);gap:16px;padding:16px}
section>h2:first-child{margin-top:0!important}
section{background:#fff;border:1px solid #dde1ea;border-radius:10px;padding:12px;min-width:0}
section h2{font-size:13px;margin:14px 0 8px;text-transform:uppercase;letter-spacing:.04em;color:#5a6275}
#transcript{height:46vh;overflow:auto;display:flex;flex-direction:column;gap:8px;padding:4px}
.msg{padding:8px 10px;border-radius:8px;white-space:pre-wrap;word-break:break-word;max-width:90%}
.user{align-self:flex-end;background:#3758f9;color:#fff}
.assistant{align-self:flex-start;background:#eef0f6}
.assistant.failed{background:#fde8e8;color:#8a1c1c}
.tool{align-self:flex-start;font:12px ui-monospace,Menlo,monospace;background:#fff7e0;border:1px solid #f0d98a;border-radius:8px;padding:6px 8px;max-width:90%;word-break:break-word}
.tool.error{background:#fde8e8;border-color:#f3b0b0}
.tool.pending{background:#eef3ff;border-color:#9fb2f5}
.decide{display:flex;gap:6px;margin-top:6px;font:13px system-ui,sans-serif}
.decide .refuse{background:#b3261e}
.decide input{flex:1;min-width:8em}
form{display:flex;gap:8px;margin-top:8px}
form textarea{flex:1;min-height:40px;resize:vertical}
pre{margin:0;font:12px ui-monospace,Menlo,monospace;white-space:pre-wrap;word-break:break-word;background:#f7f8fb;border-radius:6px;padding:8px;max-height:22vh;overflow:auto}
#events{font:12px ui-monospace,Menlo,monospace;max-height:24vh;overflow:auto;margin:0;padding-left:32px}
#error{display:none;margin:0 16px;padding:10px 12px;border-radius:8px;background:#fde8e8;color:#8a1c1c;border:1px solid #f3b0b0}
#error.shown{display:block}
.row{display:flex;gap:8px;align-items:end;flex-wrap:wrap;margin-bottom:8px}
.muted{color:#5a6275;font-size:12px}
@media (max-width:800px){main{grid-template-columns:1fr}}
`;

export const PLAYGROUND_SCRIPT = String.raw`
'use strict';
const $ = (id) => document.getElementById(id);
// The routes live beside the page: /playground -> /agent/ (a path prefix a proxy added stays).
const base = location.pathname.replace(/\/playground\/?$/, '') + '/agent/';
const saved = sessionStorage.getItem('agent-router-playground');
if (saved) { try { const s = JSON.parse(saved); $('agent').value = s.agent || ''; $('token').value = s.token || ''; } catch (e) {} }

function remember() {
  sessionStorage.setItem('agent-router-playground', JSON.stringify({ agent: $('agent').value, token: $('token').value }));
}
function agentUrl(route) {
  const id = $('agent').value.trim();
  if (!id) throw new Error('Enter an agent id first');
  return base + encodeURIComponent(id) + '/' + route;
}
function headers(json) {
  const h = {};
  if (json) h['content-type'] = 'application/json';
  const token = $('token').value.trim();
  if (token) h['authorization'] = /\s/.test(token) ? token : 'Bearer ' + token;
  return h;
}
function clearError() { $('error').className = ''; $('error').textContent = ''; }
function showError(text) { const box = $('error'); box.textContent = text; box.className = 'shown'; }
// An API error as the API gives it: status, code and message, and the body as sent.
async function showResponseError(res) {
  const text = await res.text();
  let line = 'HTTP ' + res.status;
  try { const body = JSON.parse(text); if (body && body.code) line += ' ' + body.code + ': ' + body.error; } catch (e) {}
  showError(line + '\n' + text);
}
function add(cls, text) {
  const el = document.createElement('div');
  el.className = cls;
  el.textContent = text;
  $('transcript').appendChild(el);
  $('transcript').scrollTop = $('transcript').scrollHeight;
  return el;
}
function logEvent(name, data) {
  const li = document.createElement('li');
  li.textContent = name + ' ' + (data.length > 300 ? data.slice(0, 300) + '...' : data);
  $('events').appendChild(li);
  $('events').scrollTop = $('events').scrollHeight;
}
function busy(on) { $('send').disabled = on; $('send').textContent = on ? 'Streaming...' : 'Send'; }

async function chat(message) {
  clearError();
  add('msg user', message);
  await streamTurn('chat?stream=events', { message });
}
// A paused turn's rest: the decisions go in one POST, streamed back like a chat reply.
async function approve(decisions) {
  clearError();
  await streamTurn('approvals?stream=events', { decisions });
}
async function streamTurn(route, body) {
  busy(true);
  let reply;
  try {
    const res = await fetch(agentUrl(route), { method: 'POST', headers: headers(true), body: JSON.stringify(body) });
    if (!res.ok) { await showResponseError(res); return; }
    // The bubble text goes to; a tool call closes it, so text after the call lands below it.
    reply = { el: add('msg assistant', '') };
    $('events').textContent = '';
    await readEvents(res, (name, data) => onEvent(name, data, reply));
    if (reply.el && !reply.el.textContent) reply.el.remove();
  } catch (e) {
    showError(String(e && e.message || e));
  } finally {
    busy(false);
    readState();
  }
}
// Server-Sent Events off the fetch body: frames split by a blank line, their event: and data: fields.
async function readEvents(res, onFrame) {
  const reader = res.body.getReader();
  const decoder = new TextDecoder();
  let buffer = '';
  for (;;) {
    const { value, done } = await reader.read();
    buffer += decoder.decode(value || new Uint8Array(), { stream: !done });
    let at;
    while ((at = buffer.search(/\r?\n\r?\n/)) !== -1) {
      const frame = buffer.slice(0, at);
      buffer = buffer.slice(at).replace(/^\r?\n\r?\n/, '');
      let name = 'message';
      const data = [];
      for (const line of frame.split(/\r?\n/)) {
        if (line.startsWith('event:')) name = line.slice(6).trim();
        else if (line.startsWith('data:')) data.push(line.slice(5).replace(/^ /, ''));
      }
      if (data.length) onFrame(name, data.join('\n'));
    }
    if (done) return;
  }
}
const calls = {};
function onEvent(name, data, reply) {
  logEvent(name, data);
  let e;
  try { e = JSON.parse(data); } catch (err) { return; }
  if (name === 'turn.started') $('turn').textContent = 'turn ' + (e.turn_id || '');
  else if (name === 'text.delta') {
    if (!reply.el) reply.el = add('msg assistant', '');
    reply.el.textContent += e.text;
    $('transcript').scrollTop = $('transcript').scrollHeight;
  } else if (name === 'tool.call') {
    if (reply.el && !reply.el.textContent) reply.el.remove();
    reply.el = null;
    calls[e.id] = add('tool', 'tool ' + e.name + '(' + JSON.stringify(e.arguments) + ') ...');
  } else if (name === 'tool.result') {
    const el = calls[e.id] || add('tool', 'tool ' + e.name);
    if (e.error) { el.className = 'tool error'; el.textContent = 'tool ' + e.name + ' failed: ' + e.error.code + ': ' + e.error.message; }
    else el.textContent = 'tool ' + e.name + ' -> ' + JSON.stringify(e.result);
  } else if (name === 'tool.approval_required') {
    askApproval(e);
  } else if (name === 'turn.paused') {
    $('turn').textContent += ' (paused: waiting for approval)';
  } else if (name === 'turn.failed') {
    if (!reply.el) reply.el = add('msg assistant', '');
    reply.el.className = 'msg assistant failed';
    reply.el.textContent += (reply.el.textContent ? '\n' : '') + e.code + ': ' + e.error;
    showError('Turn failed: ' + e.code + ': ' + e.error);
  }
}

// Each waiting call gets Approve and Refuse; once every call of the paused turn has a decision, they go together.
let decisions = [];
let waiting = 0;
function askApproval(e) {
  const el = calls[e.id] || (calls[e.id] = add('tool', ''));
  el.className = 'tool pending';
  el.textContent = 'tool ' + e.name + '(' + JSON.stringify(e.arguments) + ') needs approval';
  const row = document.createElement('div');
  row.className = 'decide';
  const reason = document.createElement('input');
  reason.placeholder = 'reason (optional)';
  const yes = document.createElement('button');
  yes.type = 'button'; yes.className = 'approve'; yes.textContent = 'Approve';
  const no = document.createElement('button');
  no.type = 'button'; no.className = 'refuse'; no.textContent = 'Refuse';
  row.append(yes, no, reason);
  el.appendChild(row);
  waiting++;
  const decide = (approved) => {
    row.remove();
    el.textContent = 'tool ' + e.name + '(' + JSON.stringify(e.arguments) + ') ' + (approved ? 'approved' : 'refused') + ' ...';
    const d = { id: e.id, approved };
    if (reason.value.trim()) d.reason = reason.value.trim();
    decisions.push(d);
    if (--waiting === 0) { const all = decisions; decisions = []; approve(all); }
  };
  yes.addEventListener('click', () => decide(true));
  no.addEventListener('click', () => decide(false));
}

async function readState() {
  try {
    const res = await fetch(agentUrl('state'), { headers: headers(false) });
    if (!res.ok) { $('state').textContent = 'HTTP ' + res.status; return; }
    const body = await res.json();
    $('state').textContent = JSON.stringify(body.state, null, 2);
  } catch (e) { $('state').textContent = String(e && e.message || e); }
}

async function invoke() {
  clearError();
  let params;
  const raw = $('params').value.trim();
  if (raw) { try { params = JSON.parse(raw); } catch (e) { showError('Params are not valid JSON: ' + e.message); return; } }
  try {
    const res = await fetch(agentUrl('invoke'), { method: 'POST', headers: headers(true), body: JSON.stringify(params === undefined ? { method: $('method').value.trim() } : { method: $('method').value.trim(), params }) });
    if (!res.ok) { $('result').textContent = ''; await showResponseError(res); return; }
    const body = await res.json();
    $('result').textContent = JSON.stringify(body.result, null, 2);
    readState();
  } catch (e) { showError(String(e && e.message || e)); }
}

$('chat').addEventListener('submit', (ev) => {
  ev.preventDefault();
  const message = $('message').value.trim();
  if (!message || $('send').disabled) return;
  $('message').value = '';
  remember();
  chat(message);
});
$('message').addEventListener('keydown', (ev) => {
  if (ev.key === 'Enter' && !ev.shiftKey) { ev.preventDefault(); $('chat').requestSubmit(); }
});
$('action').addEventListener('submit', (ev) => { ev.preventDefault(); remember(); invoke(); });
$('refresh').addEventListener('click', () => { clearError(); remember(); readState(); });
$('agent').addEventListener('change', () => { remember(); decisions = []; waiting = 0; $('transcript').textContent = ''; $('events').textContent = ''; readState(); });
// The agent list, when the server serves GET /agents (enableListAgents) and lets this caller read it.
fetch(base.replace(/agent\/$/, 'agents'), { headers: headers(false) }).then((r) => r.ok ? r.json() : null).then((body) => {
  for (const a of (body && body.agents) || []) { const o = document.createElement('option'); o.value = a.id; $('ids').appendChild(o); }
}, () => {});
`;

/** The page, its script and style inline (allowed by hash, see playground.ts). */
export function playgroundHtml(): string {
  return `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>agent-router playground</title>
<style>${PLAYGROUND_STYLE}</style>
</head>
<body>
<header>
  <h1>agent-router playground</h1>
  <label>Agent id <input id="agent" list="ids" value="calc-1" autocomplete="off" spellcheck="false"></label>
  <datalist id="ids"></datalist>
  <label>Token (sent as Authorization) <input id="token" type="password" placeholder="optional" autocomplete="off"></label>
  <span id="turn" class="muted"></span>
</header>
<p id="error" role="alert"></p>
<main>
  <section>
    <h2>Chat</h2>
    <div id="transcript" aria-live="polite"></div>
    <form id="chat">
      <textarea id="message" placeholder="Message (Enter sends, Shift+Enter breaks the line)"></textarea>
      <button id="send" type="submit">Send</button>
    </form>
    <h2>Events</h2>
    <ol id="events"></ol>
  </section>
  <section>
    <h2>State</h2>
    <div class="row"><button id="refresh" type="button">Read state</button></div>
    <pre id="state">{}</pre>
    <h2>Action</h2>
    <form id="action" class="row">
      <label>Method <input id="method" value="increment" spellcheck="false"></label>
      <label>Params (JSON) <input id="params" value="{&quot;by&quot;: 2}" spellcheck="false"></label>
      <button id="invoke" type="submit">Call</button>
    </form>
    <pre id="result"></pre>
  </section>
</main>
<script>${PLAYGROUND_SCRIPT}</script>
</body>
</html>
`;
}
