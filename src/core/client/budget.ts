/**
 * What is left of an outbound call's budget once a host is chosen. Choosing one can wait (a
 * service's first use reads the registry, which may be slow or unreachable); a call whose budget
 * that wait spent is not sent: the host is given back untouched, as a `cancelled` outcome that no
 * host is charged for and outlier detection never sees, and the caller gets its timeout.
 */
import type { UpstreamLease } from '../upstream/types.js';

/**
 * Milliseconds left before `deadline` (epoch ms), at least 1; undefined when none are left, and
 * then `lease` has been released as cancelled: the caller fails with its timeout without sending.
 */
export function budgetLeft(lease: UpstreamLease, deadline: number): number | undefined {
  const left = Math.floor(deadline - Date.now());
  if (left > 0) return left;
  lease.release({ kind: 'cancelled' }, 0);
  return undefined;
}
