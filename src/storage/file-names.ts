import { createHash } from 'node:crypto';

/** How much of the id shows in its file name, for people listing the directory. */
const SLUG_LENGTH = 40;

/**
 * The base file name (no extension) for an agent id: a readable slug, then
 * the SHA-256 of the id. The hash alone makes the name unique; the slug is a
 * courtesy for people listing the directory and never decides anything.
 *
 * Why this shape is safe for any id:
 * - only `[a-z0-9_-]` reach the disk, so `../x`, `a/b`, `C:\x` or a NUL
 *   cannot name another directory or a device;
 * - everything is lower case, so `Bob` and `bob` differ in their hash, not
 *   in letter case, and stay apart on case-insensitive file systems (macOS,
 *   Windows);
 * - the name never is nor starts with a DOS device name followed by a dot
 *   (`CON`, `NUL.txt` become `con-<hash>`, `nul_txt-<hash>`), which Windows
 *   would open as the device;
 * - the length is bounded (at most 105 characters) however long the id is.
 *
 * The hash covers the id's UTF-16 code units, so even ids that are not
 * well-formed Unicode (lone surrogates) get distinct names.
 */
export function journalBaseName(agentId: string): string {
  const slug = agentId
    .slice(0, SLUG_LENGTH * 2)
    .toLowerCase()
    .replace(/[^a-z0-9]+/g, '_')
    .replace(/^_+|_+$/g, '')
    .slice(0, SLUG_LENGTH);
  const hash = createHash('sha256').update(agentId, 'utf16le').digest('hex');
  return `${slug === '' ? 'agent' : slug}-${hash}`;
}
