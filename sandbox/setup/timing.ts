/** A bounded wait that leaves no timer behind: `promise`'s value, or `otherwise` after `ms`. */
export async function within<T, U>(promise: Promise<T>, ms: number, otherwise: U): Promise<T | U> {
  let timer: NodeJS.Timeout | undefined;
  try {
    return await Promise.race([promise, new Promise<U>((r) => (timer = setTimeout(() => r(otherwise), ms)))]);
  } finally {
    clearTimeout(timer);
  }
}
