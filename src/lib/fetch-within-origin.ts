/** Redirects followed at most for one request. */
const MAX_REDIRECTS = 5;

/**
 * `send` (one fetch with `redirect: 'manual'`), following only the redirects
 * that keep the method and body (307, 308) and stay on the request's
 * origin: a gateway's trailing-slash redirect works, while one to another
 * origin, which fetch would follow re-sending the configured credentials
 * and the conversation, comes back as the 3xx it is, for the caller to
 * refuse. Shared by HTTPTransport and the model adapters.
 */
export async function fetchWithinOrigin(send: (url: URL) => Promise<Response>, url: URL): Promise<Response> {
  for (let hops = 0; ; hops++) {
    const response = await send(url);
    const location = response.headers.get('location');
    if ((response.status !== 307 && response.status !== 308) || location === null || hops === MAX_REDIRECTS) return response;
    const next = URL.canParse(location, url.href) ? new URL(location, url) : undefined;
    if (next === undefined || next.origin !== url.origin) return response;
    // The redirect's own body is not read: let its connection go back to the pool.
    await response.body?.cancel().catch(() => {});
    url = next;
  }
}
