/// <reference types="node" preserve="true" />
// The declarations use node:http types: a project that does not list Node's types (tsconfig "types": []) gets them, or an error naming @types/node, instead of any.
// Agents
export { Agent } from './agent/agent.ts';
export type { AgentOptions, StateUpdate, TurnOptions } from './agent/agent.ts';
export type { ToolApproval, ToolContext, ToolDeclaration, ToolOption } from './agent/tools.ts';

// Registry
export { AgentRegistry } from './registry/registry.ts';
export type { AgentClass, RegisterOptions, RegistryTarget } from './registry/registry.ts';

// HTTP router
export { AgentRouter } from './router/router.ts';
export { continueListener } from './http/continue.ts';
export type { AgentRequestListener, AgentRouterOptions, Logger, RequestHint, TurnEndInfo, TurnStartInfo } from './router/router.ts';
export type { Tracer, TraceSpan } from './lib/trace.ts';
export type { Authorize, AuthorizeContext } from './http/authorize.ts';
export type { CorsOptions } from './http/cors.ts';
export type { OpenAPIDocument, OpenAPIOperation, Schema } from './router/openapi.ts';

// Standalone server
export { AgentServer, type ServingAgentServer } from './server/server.ts';
export type { AgentServerConfig, FileConfig, ServerSettings } from './server/config.ts';
export { readConfigFile } from './server/config.ts';
export { AgentPool } from './registry/pool.ts';
export type { AgentPoolOptions, EvictReason, LiveAgentInfo } from './registry/pool.ts';

// Models
export { echoModel } from './models/echo.ts';
export { scriptedModel } from './models/scripted.ts';
export type { ScriptedFunction, ScriptedReply, ScriptedStep, ScriptedToolCall } from './models/scripted.ts';
export type { Model, ModelChunk, ModelRequest } from './models/model.ts';
export { openAIModel } from './models/openai.ts';
export type { OpenAIModelOptions } from './models/openai.ts';
export { anthropicModel } from './models/anthropic.ts';
export type { AnthropicModelOptions } from './models/anthropic.ts';
export type { ProviderHTTPOptions } from './models/provider-http.ts';
export { modelFromEnv } from './models/from-env.ts';
export type { Env } from './models/from-env.ts';

// Storage
export { MemoryStorage } from './storage/memory.ts';
export { FileStorage } from './storage/file.ts';
export type { FileStorageOptions } from './storage/file.ts';
export { postgresStorage, postgresStorageDDL } from './storage/postgres.ts';
export type { PgPoolClientLike, PgPoolLike, PgQueryable, PgQueryResultLike, PostgresStorage, PostgresStorageOptions } from './storage/postgres.ts';
export { redisStorage } from './storage/redis.ts';
export type { IoRedisLike, NodeRedisLike, RedisClientLike, RedisStorage, RedisStorageOptions } from './storage/redis.ts';
export type { AgentRecord, SharedStorage, Storage, SyncStorage, TurnCommit, Unlock } from './storage/storage.ts';

// Transports
export { HTTPTransport } from './transports/http.ts';
export type { FetchLike, HeadersInput, HTTPTransportCallOptions, HTTPTransportOptions } from './transports/http.ts';
export { isTransport } from './transports/transport.ts';
export type { AgentTransport, ChunkStream, TransportCallOptions } from './transports/transport.ts';

// Server-Sent Events
export { createSSEParser, readSSE } from './sse/parser.ts';
export type { ReadSSEOptions, SSEEvent, SSEParser, SSEParserOptions } from './sse/parser.ts';

// Errors
export { AgentNotFoundError, AgentRouterError, LockLostError, ModelProviderError, StorageUnavailableError, UpstreamError, VersionConflictError, isAgentRouterError } from './errors.ts';

// Shared types
export type { AssistantMessage, ChatMessage, JsonCompatible, JsonObject, JsonPrimitive, JsonState, JsonValue, TokenUsage, ToolCall, ToolDefinition, ToolMessage, UserMessage } from './types.ts';
