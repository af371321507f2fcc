/**
 * Versions of the built-in storages. A record's first version is a random
 * multiple of 2^16, plus one; each commit adds one. So a record made again
 * after `delete` never takes up the versions of the one before it (they
 * would otherwise both start at 1): an instance still holding the deleted
 * record, in this process or another, sees another version and another
 * record, and reloads instead of appending to a history that is gone. A
 * counter past 2^16 commits moves into the next record's range, which only
 * costs one full reload where a tail would have done.
 *
 * Kept below 10^14: Redis's Lua turns numbers into strings with 14
 * significant digits, so a larger version would not survive a commit there.
 */
import { randomInt } from 'node:crypto';

const RECORD_SPAN = 2 ** 16;
/** 2^30 ranges of 2^16: the largest version stays under 10^14 (7.04e13). */
const RECORDS = 2 ** 30;

/** The version of a record's first commit. */
export function firstVersion(): number {
  return randomInt(RECORDS) * RECORD_SPAN + 1;
}

/**
 * Whether two versions (neither 0) can belong to one record, made once: false
 * means the record was deleted and made again between them. Versions from a
 * storage that starts at 1 always can.
 */
export function sameRecord(a: number, b: number): boolean {
  return Math.floor((a - 1) / RECORD_SPAN) === Math.floor((b - 1) / RECORD_SPAN);
}
