/** The one request and answer every row carries (small JSON, as the issue asks). */
export const REQUEST_BODY = '{"name":"bench","id":1}';
export const ANSWER = { id: 1, name: 'bench', ok: true, msg: 'hello from the bench backend' };
export const ANSWER_BODY = JSON.stringify(ANSWER);
export const BACKEND_SERVICE = 'go.mesh.srv.bench';
export const API_SERVICE = 'go.mesh.api.bench';
/** Path used on every front end: /bench/call → <ns>.bench, Bench.Call. */
export const PATH = '/bench/call';
