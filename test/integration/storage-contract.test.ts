/**
 * One Storage contract, run against every backend: memory, file (a temp
 * directory), Postgres (a schema of its own) and Redis through both the
 * node-redis and the ioredis client (a key prefix of its own). The real
 * servers on 127.0.0.1 are required; see .ci/run.
 */
import { describe } from 'node:test';
import { allBackends } from '../helpers/storage-backends.ts';
import { defineStorageContract } from '../helpers/storage-contract.ts';

for (const backend of allBackends()) {
  describe(`Storage contract: ${backend.name}`, () => defineStorageContract(backend));
}
