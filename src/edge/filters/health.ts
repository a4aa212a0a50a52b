/** The health-check path of a front end: 200 while the process is live, 503 while it drains (admin /healthcheck/fail). */
import { sendJson } from '../../base/http/respond.js';
import type { EdgeFilter } from './filter.js';

/** The health-check path of every front end. */
export const HEALTH_PATH = '/_mesh/health';

export function health<R>(isLive: () => boolean): EdgeFilter<R> {
  return (next) => (ex) => {
    if (ex.target.path !== HEALTH_PATH) return next(ex);
    ex.req.resume();
    const live = isLive();
    sendJson(ex.res!, live ? 200 : 503, live ? '{"status":"ok"}' : '{"status":"draining"}');
  };
}
