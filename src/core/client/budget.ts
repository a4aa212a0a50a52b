/**
 * What is left of an outbound call's budget once a host is chosen. Choosing one can wait (a
 * service's first use reads the registry, which may be slow or unreachable); a call whose budget
 * that wait spent is not sent: the host is given back untouched, as a `cancelled` outcome that no
 * host is charged for and outlier detection never sees, and the caller gets its timeout.
 */
import type { UpstreamLease } from '../upstream/types.js';

/**
 * Waits for a host being chosen (`pending`) no longer than the call's budget (`deadline`, epoch
 * ms): the lease, or undefined once the budget is spent while the choice still waits (a service's
 * first lookup in a registry that does not answer). A lease that comes after that is released as
 * cancelled, an error after that is dropped: the caller has had its timeout.
 */
export function leaseWithin(pending: Promise<UpstreamLease>, deadline: number): Promise<UpstreamLease | undefined> {
  return new Promise((resolve, reject) => {
    let late = false;
    const timer = setTimeout(() => {
      late = true;
      resolve(undefined);
    }, Math.max(0, deadline - Date.now()));
    pending.then(
      (lease) => {
        if (late) return lease.release({ kind: 'cancelled' }, 0);
        clearTimeout(timer);
        resolve(lease);
      },
      (err: unknown) => {
        if (late) return;
        clearTimeout(timer);
        reject(err as Error);
      },
    );
  });
}

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
