import { CONFIG_FILE_KEYS } from '../server/config.ts';

/** Words, comma-separated, in lines of the help's right column (from column 22 to 78). */
function column(words: readonly string[]): string {
  const lines: string[] = [];
  let line = '';
  for (const [i, word] of words.entries()) {
    const item = i < words.length - 1 ? `${word},` : word;
    if (line !== '' && line.length + 1 + item.length > 56) {
      lines.push(line);
      line = '';
    }
    line += line === '' ? item : ` ${item}`;
  }
  return [...lines, line].map((text) => `${' '.repeat(22)}${text}`).join('\n');
}

/** `agent-router --help`. */
export const HELP = `Usage: agent-router serve [module] [options]

Serves agents over HTTP: POST /agent/{agent_id}/chat (?stream=true for SSE),
POST /agent/{agent_id}/invoke, GET /agent/{agent_id}/state, GET /healthz.

  module            a .js, .mjs or .cjs file (.ts when run under tsx) whose
                    default export is an AgentRegistry, an Agent or an
                    AgentServer; resolved from the current directory.
                    Without one, a demo registry is served: echo-*, chat-*,
                    counter-* and calc-* (tools) agents kept in --data-dir;
                    no keys or services needed (chat-* uses OPENAI_API_KEY
                    or ANTHROPIC_API_KEY when set).

Options:
  -p, --port <n>      port to listen on; 0 picks a free one
                      (default: $PORT, else 8080)
      --host <addr>   address to listen on (default: 127.0.0.1, this machine
                      only; 0.0.0.0 for every interface)
  -c, --config <file> a JSON file of options; its snake_case keys:
${column(CONFIG_FILE_KEYS)}
      --idle_timeout <s>
                      seconds before an idle live agent is dropped
                      (default 300; 0: never)
      --max_agents <n>
                      live agents at most (default 10000)
      --enable_list_agents
                      serve GET /agents (default: off)
                      These three may also be written with dashes
                      (--idle-timeout).
      --allowed-hosts <names>
                      Host names answered besides localhost and IP
                      addresses, comma-separated (.example.com: that
                      name and every name under it); for a proxy on this
                      machine that passes its own name on
      --data-dir <dir> where the demo keeps its agents (default: ./.data)
      --storage <url> the demo's storage instead of files in --data-dir:
                      memory                       lost on exit
                      file:<dir>                   same as --data-dir <dir>
                      postgres://user@host:5432/db needs \`npm install pg\`
                        in your project; ?schema=s&table_prefix=p optional
                      redis://host:6379/0          needs \`npm install redis\`
                        (or ioredis); rediss:// for TLS; ?prefix=p optional
                      Servers on one Postgres or Redis share turn
                      control: a stream rejoined, or a turn cancelled,
                      through any of them.
                      Not with a module: a module chooses its own storage.
  -h, --help          show this help
  -v, --version       print the version

Flags beat the config file. SIGINT or SIGTERM shuts down gracefully:
running turns and streams get shutdown_timeout seconds (default 10) to finish.

Examples:
  agent-router serve --port 8080
  agent-router serve --storage postgres://postgres@localhost:5432/postgres
  agent-router serve ./agents.js --config agent-router.json
  node --import tsx ./node_modules/.bin/agent-router serve ./agents.ts
`;
