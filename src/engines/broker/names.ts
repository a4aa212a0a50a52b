/**
 * The one rule for topic and queue names, applied by every broker backend and every front end
 * (the sidecar's /broker, the event handler, the CLI through the broker): a non-empty string of
 * at most MAX_NAME_LENGTH characters with no whitespace and no control character (C0, DEL, C1,
 * the Unicode line separators and bidi overrides). A front end answers 400 with the problem; the
 * name is never echoed raw (escaped by `shown`), so it cannot forge log lines or answers.
 */
import { hasControlChars } from '../../base/util/text.js';
import { shown } from '../registry/validate.js';

export const MAX_NAME_LENGTH = 256;

/** Why a topic or queue name breaks the rule, or undefined; the name appears only escaped. */
export function nameProblem(what: 'topic' | 'queue', name: unknown): string | undefined {
  if (typeof name !== 'string' || name === '') return `${what}: required`;
  if (name.length > MAX_NAME_LENGTH) return `${what}: longer than ${MAX_NAME_LENGTH} characters`;
  if (/\s/.test(name)) return `${what}: ${shown(name)} must not contain whitespace`;
  if (hasControlChars(name)) return `${what}: ${shown(name)} must not contain control characters`;
  return undefined;
}

/** Validates a topic name (nameProblem); throws a TypeError with the problem. */
export function checkTopic(topic: unknown): asserts topic is string {
  const problem = nameProblem('topic', topic);
  if (problem) throw new TypeError(problem);
}

/** Validates a queue option: absent, or a name (nameProblem); throws a TypeError with the problem. */
export function checkQueue(queue: unknown): asserts queue is string | undefined {
  if (queue === undefined) return;
  const problem = nameProblem('queue', queue);
  if (problem) throw new TypeError(problem);
}
