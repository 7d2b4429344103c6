'use strict';
/**
 * A consumer that follows a rabbitmq-retry contract, written from docs/contract.md alone (the section named
 * in each comment). It handles one delivery at a time and waits for each copy's confirm before it settles the
 * original, the simplest way the contract allows (docs/contract.md, "Publishing a copy").
 *
 *   const { consume, PermanentError } = require('./consumer');
 *   const consumer = await consume({ url: 'amqp://app:secret@broker:5672', contract, handler });
 *   ...
 *   await consumer.stop();
 *
 * `handler(message)` resolves on success and throws (or rejects) on failure: a `PermanentError` parks the
 * message at once, any other error is a failed attempt that is retried until the contract's `max_retries`.
 */
const amqp = require('amqplib');

const STRATEGIES = ['tiers', 'levels', 'native'];
const MAX_REASON_BYTES = 1024;
const PUBLISH_FAILURE_PAUSE_MS = 1000;

class PermanentError extends Error {
  constructor(message) {
    super(message);
    this.name = 'PermanentError';
  }
}

class ContractError extends Error {}

/** "Strategies": a contract without `strategy` is a `tiers` contract; an unknown strategy is refused. */
function strategyOf(contract) {
  const strategy = contract.strategy === undefined ? 'tiers' : contract.strategy;
  if (!STRATEGIES.includes(strategy)) {
    throw new ContractError(`retry contract for ${contract.queue} uses strategy ${strategy}, which this consumer ` +
      `does not support (supported: ${STRATEGIES.join(', ')})`);
  }
  return strategy;
}

/** "Header types": a counter is any AMQP integer (or a decimal string); absent or malformed counts as 0. */
function counter(value) {
  if (value === undefined || value === null) return 0;
  if (typeof value === 'object' && Object.hasOwn(value, '!')) value = value.value;
  if (Buffer.isBuffer(value)) value = value.toString('utf8');
  const number = typeof value === 'string' && /^\s*-?\d+\s*$/.test(value) ? Number(value) : value;
  return Number.isInteger(number) ? number : 0;
}

/** "Header types": counters we write are signed 32-bit integers (`I`). */
function int32(value) {
  return { '!': 'int', value };
}

/** "Header types": ISO 8601 UTC with milliseconds and `Z`. */
function utcIso(date = new Date()) {
  return date.toISOString();
}

/** "Header types": at most 1024 bytes of UTF-8, cut on a character boundary, `...` ending a cut text. */
function truncateReason(text) {
  const bytes = Buffer.from(text, 'utf8');
  if (bytes.length <= MAX_REASON_BYTES) return text;
  let end = MAX_REASON_BYTES - 3;
  while (end > 0 && (bytes[end] & 0xc0) === 0x80) end -= 1; // back to the first byte of a cut character
  return bytes.subarray(0, end).toString('utf8') + '...';
}

/** "Broker headers": what a copy never carries over: the broker's dead-letter history and delivery counters. */
function isBrokerHeader(name) {
  return name === 'x-death' || name.startsWith('x-first-death-') || name.startsWith('x-last-death-') ||
    name === 'x-delivery-count' || name === 'x-acquired-count';
}

function withoutBrokerHeaders(headers) {
  return Object.fromEntries(Object.entries(headers || {}).filter(([name]) => !isBrokerHeader(name)));
}

/** "Strategy levels": the delay of retry `attempt`, in ms, never above `backoff.max_ms`. */
function retryDelayMs(contract, attempt, random = Math.random) {
  const { initial_ms: initial, multiplier, max_ms: max, jitter } = contract.backoff;
  const base = Math.min(max, initial * multiplier ** (attempt - 1));
  const factor = jitter ? 1 - jitter + random() * 2 * jitter : 1;
  return Math.min(max, Math.ceil(base * factor));
}

function delayUnits(contract, delayMs) {
  return Math.min(Math.ceil(delayMs / contract.delay_unit_ms), 2 ** contract.delay_levels - 1);
}

/** "Strategy levels": the level of the delay's highest 1 bit (level 0 for 0 units). */
function delayExchange(contract, delayMs) {
  const exchanges = contract.delay_exchanges;
  if (!exchanges || exchanges.length === 0) return contract.delay_exchange;
  const units = delayUnits(contract, delayMs);
  return exchanges[units === 0 ? 0 : units.toString(2).length - 1];
}

/** "Strategy levels": `delay_words` binary digits of the delay in units, each followed by `.`, then the queue. */
function delayRoutingKey(contract, delayMs) {
  const bits = delayUnits(contract, delayMs).toString(2).padStart(contract.delay_words, '0');
  return [...bits].map((bit) => `${bit}.`).join('') + contract.queue;
}

/** The connection options of `url`, for the contract's vhost. */
function connectionOptions(url, vhost) {
  const parsed = new URL(url);
  return {
    protocol: parsed.protocol.replace(':', ''),
    hostname: parsed.hostname,
    port: parsed.port ? Number(parsed.port) : 5672,
    username: decodeURIComponent(parsed.username || 'guest'),
    password: decodeURIComponent(parsed.password || 'guest'),
    vhost,
  };
}

const sleep = (ms) => new Promise((resolve) => { setTimeout(resolve, ms); });

/**
 * Consume the contract's queue until `stop()`. `onEvent(name, fields)` hears every outcome: `delivery`
 * (before the handler runs), `acked`, `retried`, `parked`, `requeued` (a copy was refused: the original went
 * back to the queue).
 */
async function consume({ url, contract, handler, prefetch = 10, onEvent = () => {} }) {
  const strategy = strategyOf(contract);
  const connection = await amqp.connect(connectionOptions(url, contract.vhost));
  connection.on('error', (error) => onEvent('connection-error', { error: String(error) }));
  const channel = await connection.createChannel();
  await channel.prefetch(prefetch);
  let confirms = null;
  let returned = false;
  let stopping = false;
  let chain = Promise.resolve();

  /** "Publishing a copy": a confirm-mode channel of its own; a broker that refuses a copy closes only it. */
  async function confirmChannel() {
    if (confirms === null) {
      const opened = await connection.createConfirmChannel();
      opened.on('return', () => { returned = true; }); // one copy in flight at a time: it is that copy
      opened.on('error', () => {}); // the close below says it all
      opened.on('close', () => { if (confirms === opened) confirms = null; });
      confirms = opened;
    }
    return confirms;
  }

  /** Publish one persistent, mandatory copy and wait for the broker's answer: null once it is confirmed,
   * else why not (a nack, a basic.return: unroutable, the channel closing). */
  async function publishConfirmed(exchange, routingKey, message, headers) {
    const p = message.properties;
    const options = {
      mandatory: true, persistent: true, headers, contentType: p.contentType,
      contentEncoding: p.contentEncoding, priority: p.priority, correlationId: p.correlationId,
      replyTo: p.replyTo, messageId: p.messageId, timestamp: p.timestamp, type: p.type, appId: p.appId,
    }; // no expiration, no userId: "Publishing a copy"
    try {
      const opened = await confirmChannel();
      returned = false;
      return await new Promise((resolve) => {
        opened.publish(exchange, routingKey, message.content, options, (error) => {
          if (error) resolve(`not confirmed: ${error.message || error}`);
          else resolve(returned ? 'returned: unroutable' : null);
        });
      });
    } catch (error) {
      return `not published: ${error.message || error}`;
    }
  }

  /** Ack the original once its copy is confirmed; otherwise put it back (nack, requeue) and pause. */
  async function copyThenAck(message, exchange, routingKey, headers, event, fields) {
    const refused = await publishConfirmed(exchange, routingKey, message, headers);
    if (refused === null) {
      channel.ack(message);
      onEvent(event, fields);
      return;
    }
    channel.nack(message, false, true);
    onEvent('requeued', { ...fields, why: refused, exchange, routing_key: routingKey });
    await sleep(PUBLISH_FAILURE_PAUSE_MS);
  }

  /** "Parking". */
  async function park(message, { reason, attempts, origin, firstFailureAt, permanent }) {
    const headers = withoutBrokerHeaders(message.properties.headers);
    delete headers[contract.attempt_header];
    Object.assign(headers, {
      'error-reason': truncateReason(reason),
      'error-queue': contract.queue,
      'original-exchange': origin.exchange,
      'original-routing-key': origin.routingKey,
      attempts: int32(attempts),
    });
    if (strategy === 'native') headers['last-failure-at'] = utcIso();
    else headers['first-failure-at'] = firstFailureAt;
    if (permanent) headers.permanent = true;
    await copyThenAck(message, contract.error_exchange, origin.routingKey, headers, 'parked',
      { id: message.properties.messageId, attempts, permanent: Boolean(permanent) });
  }

  /** "Retrying" for tiers (republish) and levels: a copy to the route of this attempt, counted in the header. */
  async function retry(message, attempt, origin, firstFailureAt) {
    let exchange;
    let routingKey;
    let waitMs;
    if (strategy === 'levels') {
      const delay = retryDelayMs(contract, attempt);
      exchange = delayExchange(contract, delay);
      routingKey = delayRoutingKey(contract, delay);
      waitMs = delayUnits(contract, delay) * contract.delay_unit_ms;
    } else {
      const tier = contract.tiers[Math.min(attempt, contract.tiers.length) - 1];
      [exchange, routingKey, waitMs] = [contract.retry_exchange, tier.routing_key, tier.delay_ms];
    }
    const headers = {
      ...withoutBrokerHeaders(message.properties.headers),
      'original-exchange': origin.exchange,
      'original-routing-key': origin.routingKey,
      'first-failure-at': firstFailureAt,
      [contract.attempt_header]: int32(attempt),
    };
    await copyThenAck(message, exchange, routingKey, headers, 'retried',
      { id: message.properties.messageId, attempt, wait_ms: waitMs, exchange, routing_key: routingKey });
  }

  async function handle(message) {
    if (stopping) { // prefetched, not handled: back to the queue, not counted as a failure
      channel.nack(message, false, true);
      return;
    }
    const headers = message.properties.headers || {};
    const deliveries = counter(headers['x-delivery-count']);
    const origin = {
      exchange: headers['original-exchange'] !== undefined ? String(headers['original-exchange'])
        : message.fields.exchange,
      routingKey: headers['original-routing-key'] !== undefined ? String(headers['original-routing-key'])
        : message.fields.routingKey,
    };
    // "Before the handler": a tiers or levels message that keeps crashing consumers is parked before the
    // broker's own delivery limit fires (never for native: there the limit is the retry budget).
    const limit = contract.delivery_limit;
    if (strategy !== 'native' && limit && deliveries >= limit) {
      await park(message, { reason: `x-delivery-count ${deliveries} reached the delivery limit ${limit}`,
        attempts: deliveries, origin, firstFailureAt: utcIso() });
      return;
    }
    const attempt = (strategy === 'native' ? deliveries : counter(headers[contract.attempt_header])) + 1;
    onEvent('delivery', { id: message.properties.messageId, attempt, headers });
    let failure = null;
    try {
      await handler(message);
    } catch (error) {
      failure = error instanceof Error ? error : new Error(String(error));
    }
    if (failure === null) {
      channel.ack(message);
      onEvent('acked', { id: message.properties.messageId, attempt });
      return;
    }
    const reason = `${failure.name}: ${failure.message}`;
    // "first-failure-at": recorded at the first failure and carried by every retry copy (tiers, levels).
    const recorded = headers['first-failure-at'];
    const firstFailureAt = attempt > 1 && recorded !== undefined ? String(recorded) : utcIso();
    if (failure instanceof PermanentError) {
      await park(message, { reason, attempts: attempt, origin, firstFailureAt, permanent: true });
    } else if (attempt > contract.max_retries) {
      await park(message, { reason, attempts: attempt, origin, firstFailureAt });
    } else if (strategy === 'native') {
      channel.reject(message, true); // retry_call: basic.reject(requeue=true), never nack
      onEvent('retried', { id: message.properties.messageId, attempt,
        wait_ms: Math.min(contract.min_delay_ms * attempt, contract.max_delay_ms) });
    } else {
      await retry(message, attempt, origin, firstFailureAt);
    }
  }

  const { consumerTag } = await channel.consume(contract.queue, (message) => {
    if (message === null) { // cancelled by the broker (queue deleted)
      onEvent('cancelled', {});
      return;
    }
    chain = chain.then(() => handle(message)).catch((error) => onEvent('error', { error: String(error) }));
  }, { noAck: false });

  return {
    /** Cancel the consumer, settle every delivery received (prefetched ones go back), then close. */
    async stop() {
      stopping = true;
      await channel.cancel(consumerTag);
      await chain;
      await connection.close();
    },
  };
}

module.exports = {
  consume, PermanentError, ContractError, strategyOf, counter, truncateReason, retryDelayMs, delayUnits,
  delayExchange, delayRoutingKey, withoutBrokerHeaders,
};
