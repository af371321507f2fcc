// A real Prometheus (Debian's `prometheus` package, which .ci/run installs) scrapes AgentServer's GET /metrics and answers a query.
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import { Agent } from '../../src/agent/agent.ts';
import { echoModel } from '../../src/models/echo.ts';
import { AgentServer } from '../../src/server/server.ts';
import { postJson } from '../helpers/http.ts';

const binary = spawnSync('sh', ['-c', 'command -v prometheus'], { encoding: 'utf8' }).stdout.trim();

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const probe = net.createServer().listen(0, '127.0.0.1', () => {
      const { port } = probe.address() as net.AddressInfo;
      probe.close(() => resolve(port));
    });
    probe.on('error', reject);
  });
}

test('metrics: a real Prometheus scrapes GET /metrics and answers a query on agent_router_turns_total', { timeout: 60_000 }, async (t) => {
  assert.notEqual(binary, '', 'prometheus is not installed (apt-get install -y prometheus)');
  const server = await new AgentServer(new Agent('bot', { model: echoModel() }), { metrics: true, logger: { error: () => {} } }).serve(0);
  t.after(() => server.close());
  for (let i = 0; i < 3; i++) assert.equal((await postJson(`${server.url}/agent/bot/chat`, { message: `hi ${i}` })).status, 200);

  const dir = mkdtempSync(path.join(tmpdir(), 'prom-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  writeFileSync(path.join(dir, 'prometheus.yml'), `global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: agent\n    static_configs:\n      - targets: ['127.0.0.1:${server.port}']\n`);
  const port = await freePort();
  const prometheus = spawn(binary, [`--config.file=${path.join(dir, 'prometheus.yml')}`, `--storage.tsdb.path=${path.join(dir, 'data')}`, `--web.listen-address=127.0.0.1:${port}`], { stdio: 'ignore' });
  t.after(() => prometheus.kill('SIGKILL'));

  const query = `http://127.0.0.1:${port}/api/v1/query?query=${encodeURIComponent('sum(agent_router_turns_total{outcome="done"})')}`;
  const deadline = Date.now() + 45_000;
  let value: string | undefined;
  while (Date.now() < deadline && value === undefined) {
    await new Promise((resolve) => setTimeout(resolve, 500));
    const reply = await fetch(query).then((r) => r.json() as Promise<{ data?: { result?: Array<{ value: [number, string] }> } }>, () => undefined);
    value = reply?.data?.result?.[0]?.value[1];
  }
  assert.equal(value, '3');
});
