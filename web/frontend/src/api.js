// Requests to the server's JSON API (docs/web.md, "API"), or, in a report written by
// csp-web --html, the answers embedded in the page under the same keys.

const token = new URLSearchParams(window.location.search).get('token') || '';
let embedded = null;
const data = document.getElementById('csp-report');
if (data && data.textContent.trim()) embedded = JSON.parse(data.textContent);

export const isReport = () => embedded !== null;

// The key of a request: path and parameters sorted by name (repeated names in the given order),
// without the token: web::requestKey builds the same.
export function requestKey(path, params) {
  const pairs = [];
  for (const [k, v] of Object.entries(params)) {
    if (v === undefined || v === null || v === '') continue;
    for (const item of Array.isArray(v) ? v : [v]) if (item !== '') pairs.push([k, String(item)]);
  }
  pairs.sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0));
  return { key: pairs.length ? `${path}?${pairs.map(([k, v]) => `${k}=${v}`).join('&')}` : path, pairs };
}

export class ApiError extends Error {}

// The answer of a request ({answer, warnings}); ApiError with the server's one line otherwise.
export async function api(path, params = {}) {
  const { key, pairs } = requestKey(path, params);
  if (embedded) {
    const hit = embedded[key];
    if (hit === undefined) throw new ApiError('not in this report (csp-web --html keeps the likely pages; serve the database with csp-web to see all)');
    if (hit.error) throw new ApiError(hit.error);
    return hit;
  }
  const query = new URLSearchParams(pairs);
  const response = await fetch(`${path}?${query}`, { headers: { 'X-CSP-Token': token } });
  let body;
  try {
    body = await response.json();
  } catch {
    throw new ApiError(`${path}: HTTP ${response.status}`);
  }
  if (!response.ok) throw new ApiError(body.error || `HTTP ${response.status}`);
  return body;
}
