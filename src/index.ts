// Agents
export { Agent } from './agent/agent.ts';
export type { AgentOptions, StateUpdate, TurnOptions } from './agent/agent.ts';

// Registry
export { AgentRegistry } from './registry/registry.ts';
export type { AgentClass, RegisterOptions, RegistryTarget } from './registry/registry.ts';

// HTTP router
export { AgentRouter } from './http/router.ts';
export type { AgentRouterOptions, Logger, RequestHint } from './http/router.ts';
export type { Authorize, AuthorizeContext } from './http/authorize.ts';
export { AgentPool } from './server/pool.ts';
export type { AgentPoolOptions, EvictReason, LiveAgentInfo } from './server/pool.ts';

// Models
export { echoModel } from './models/echo.ts';
export { scriptedModel } from './models/scripted.ts';
export type { ScriptedFunction, ScriptedReply } from './models/scripted.ts';
export type { Model, ModelChunk, ModelRequest } from './models/model.ts';

// Storage
export { MemoryStorage } from './storage/memory.ts';
export type { AgentRecord, Storage, TurnCommit, Unlock } from './storage/storage.ts';

// Transports
export { isTransport } from './transports/transport.ts';
export type { AgentTransport, ChunkStream, TransportCallOptions } from './transports/transport.ts';

// Server-Sent Events
export { createSSEParser, readSSE } from './sse/parser.ts';
export type { SSEEvent, SSEParser, SSEParserOptions } from './sse/parser.ts';

// Errors
export { AgentNotFoundError, AgentRouterError, UpstreamError, VersionConflictError, isAgentRouterError } from './errors.ts';

// Shared types
export type { ChatMessage, JsonObject, JsonPrimitive, JsonValue, TokenUsage } from './types.ts';
