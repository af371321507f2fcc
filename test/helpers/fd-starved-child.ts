/**
 * A child process for the storage outage test: an AgentServer on port 0 on
 * a FileStorage in the directory given as argument, which can be made to run
 * out of file descriptors (EMFILE) and given them back, by lines on stdin:
 * `starve` opens /dev/null until the kernel refuses, `feed` closes them. It
 * answers each line on stdout (`starved`, `fed`); prints `listening on
 * <url>` once serving.
 */
import { closeSync, openSync } from 'node:fs';
import { createInterface } from 'node:readline';
import { AgentRegistry } from '../../src/registry/registry.ts';
import { AgentServer } from '../../src/server/server.ts';
import { FileStorage } from '../../src/storage/file.ts';
import { counterOn, echoOn } from './agents.ts';

const storage = new FileStorage(process.argv[2] as string);
const registry = new AgentRegistry();
registry.register('counter-.*', counterOn(storage));
registry.register('.*', echoOn(storage));
const server = new AgentServer(registry);
await server.serve(0);
process.stdout.write(`listening on ${server.url}\n`);

const held: number[] = [];
createInterface({ input: process.stdin }).on('line', (line) => {
  if (line === 'starve') {
    try {
      for (;;) held.push(openSync('/dev/null', 'r'));
    } catch (error) {
      process.stdout.write(`starved ${(error as NodeJS.ErrnoException).code}\n`);
    }
  } else if (line === 'feed') {
    for (const fd of held.splice(0)) closeSync(fd);
    process.stdout.write('fed\n');
  }
});
