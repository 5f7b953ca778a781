/**
 * Tool definitions for the providers, generated from the same zod schemas that validate calls.
 * OpenAI's strict function calling needs every field required, so an optional field goes out as
 * required and nullable; a null argument then means "not given" and is dropped before validation.
 */
import { zodFunction } from 'openai/helpers/zod';
import { z } from 'zod';
import { toolNames, TOOLS } from '../../core/tools';

function strictWire(schema: z.ZodObject): z.ZodObject {
  const shape = Object.fromEntries(
    Object.entries(schema.shape).map(([key, field]) => {
      const f = field as z.ZodType;
      return [key, f instanceof z.ZodOptional ? (f.unwrap() as z.ZodType).nullable().describe(f.description ?? '') : f];
    }),
  );
  return z.strictObject(shape);
}

const openai = new Map<boolean, unknown[]>();
const anthropic = new Map<boolean, unknown[]>();

/** The same definitions for every request (built once per process); `orchestrating` adds the sub-run tools. */
export function openaiTools(orchestrating = false): unknown[] {
  // Round-tripped through JSON: the helper attaches parse functions that are not part of the wire format.
  const make = () => toolNames(orchestrating).map((name) => JSON.parse(JSON.stringify(zodFunction({ name, description: TOOLS[name].description, parameters: strictWire(TOOLS[name].args as unknown as z.ZodObject) }))));
  if (!openai.has(orchestrating)) openai.set(orchestrating, make());
  return openai.get(orchestrating)!;
}

export function anthropicTools(orchestrating = false): unknown[] {
  if (!anthropic.has(orchestrating)) anthropic.set(orchestrating, anthropicDefinitions(orchestrating));
  return anthropic.get(orchestrating)!;
}

function anthropicDefinitions(orchestrating: boolean): unknown[] {
  return (toolNames(orchestrating).map((name) => {
    const { $schema: _drop, ...schema } = z.toJSONSchema(TOOLS[name].args, { io: 'input' }) as Record<string, unknown>;
    return { name, description: TOOLS[name].description, input_schema: schema };
  }));
}

/** Arguments from the wire: nulls stand for fields not given. */
export function dropNulls(args: unknown): unknown {
  if (args === null || typeof args !== 'object' || Array.isArray(args)) return args;
  return Object.fromEntries(Object.entries(args).filter(([, v]) => v !== null));
}
