// A node:test reporter that lists only the failed tests, with file and first lines of the error.
// scripts/test.mjs prints its list after the coverage table, so the end of a CI log names them.
import path from 'node:path';

export default async function* failures(source) {
  for await (const event of source) {
    if (event.type !== 'test:fail') continue;
    const { name, file, details } = event.data;
    const error = details?.error;
    // A parent fails when a subtest did; the subtest is listed itself.
    if (error?.failureType === 'subtestsFailed') continue;
    const where = file ? path.relative(process.cwd(), file) : '';
    const cause = error?.cause ?? error;
    const lines = String(cause?.stack ?? cause?.message ?? cause ?? '').split('\n');
    const message = lines.filter((line) => !/\(node:|at node:/.test(line)).slice(0, 12).join('\n    ');
    yield `✖ ${where === '' ? '' : `${where}: `}${name}\n    ${message}\n`;
  }
}
