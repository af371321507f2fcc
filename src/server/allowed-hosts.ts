import { BlockList, isIP } from 'node:net';

/**
 * DNS rebinding: a page on `attacker.example`, whose name the attacker then
 * points at 127.0.0.1, talks to a server on the visitor's machine as its own
 * origin, so no CORS rule applies and it can read every answer. Its requests
 * still say `Host: attacker.example`. A server only this machine can reach
 * therefore answers only Host names that mean this machine, and names the
 * user allowed.
 *
 * An IP address as the Host is always allowed: a rebound page's requests
 * carry the attacker's name, and a page served from an IP address is sent to
 * that address, not to this server.
 */
export type AllowedHosts = readonly string[] | true;

/** A check of a request's Host header: true when it may be answered. */
export type HostCheck = (host: string | undefined) => boolean;

/**
 * The check for a server listening on `listeningOn`, or undefined when none
 * applies: `allowed` is true, or it is not given and the server is reachable
 * from other machines anyway (then `authorize` is what protects it).
 * Entries are host names without port; one starting with a dot also allows
 * every name under it (`.example.com`: `example.com`, `api.example.com`).
 */
export function hostCheck(allowed: AllowedHosts | undefined, listeningOn: string | undefined): HostCheck | undefined {
  if (allowed === true) return undefined;
  if (allowed === undefined && (listeningOn === undefined || !isLoopback(listeningOn))) return undefined;
  const names = new Set<string>();
  const suffixes: string[] = [];
  for (const entry of allowed ?? []) {
    // As a Host header's name is read: lower case, without a trailing dot.
    const name = entry.toLowerCase().replace(/\.$/, '');
    if (name.startsWith('.')) {
      suffixes.push(name);
      names.add(name.slice(1));
    } else names.add(name);
  }
  // The Host header a client sends is nearly always the same one: the last one allowed is kept.
  let lastAllowed: string | undefined;
  return (host) => {
    // HTTP/1.0 may send none (and HTTP/1.1 without one is refused before this); a browser always sends it.
    if (host === undefined || host === lastAllowed) return true;
    const name = hostname(host);
    const ok = names.has(name) || alwaysAllowed(name) || suffixes.some((suffix) => name.endsWith(suffix));
    if (ok) lastAllowed = host;
    return ok;
  };
}

/** 127.0.0.0/8 and ::1, however written (`0:0:0:0:0:0:0:1`, `::ffff:127.0.0.1`). */
const LOOPBACK = new BlockList();
LOOPBACK.addSubnet('127.0.0.0', 8, 'ipv4');
LOOPBACK.addAddress('::1', 'ipv6');

/** True for an address or name that only this machine reaches. */
export function isLoopback(host: string): boolean {
  const name = host.toLowerCase().replace(/^\[(.*)\]$/, '$1');
  if (name === 'localhost' || name.endsWith('.localhost')) return true;
  const family = isIP(name);
  return family !== 0 && LOOPBACK.check(name, family === 4 ? 'ipv4' : 'ipv6');
}

/** `localhost`, a name under `.localhost` (RFC 6761: always this machine), or an IP address. */
function alwaysAllowed(name: string): boolean {
  if (name === 'localhost' || name.endsWith('.localhost')) return true;
  return name.startsWith('[') ? name.endsWith(']') && isIP(name.slice(1, -1)) === 6 : isIP(name) === 4;
}

/** The Host header's name, lower case, without its port or a trailing dot; an IPv6 address keeps its brackets. */
function hostname(host: string): string {
  const lower = host.toLowerCase();
  // The whole bracketed form or nothing: cut at the bracket, `[::1]evil.example` read as the address `[::1]`.
  if (lower.startsWith('[')) return /^\[[^\]]*\](?::\d*)?$/.test(lower) ? lower.slice(0, lower.indexOf(']') + 1) : lower;
  const name = lower.replace(/:\d*$/, '');
  return name.endsWith('.') ? name.slice(0, -1) : name;
}
