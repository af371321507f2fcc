import { AbstractChat, DefaultChatTransport, type ChatState, type ChatStatus, type UIMessage } from 'ai';

/** The in-memory state a framework binding (React's useChat) would keep: the AI SDK's own Chat, in Node. */
class PlainState implements ChatState<UIMessage> {
  status: ChatStatus = 'ready';
  error: Error | undefined = undefined;
  messages: UIMessage[] = [];
  pushMessage = (message: UIMessage): void => {
    this.messages = [...this.messages, message];
  };
  popMessage = (): void => {
    this.messages = this.messages.slice(0, -1);
  };
  replaceMessage = (index: number, message: UIMessage): void => {
    this.messages = [...this.messages.slice(0, index), message, ...this.messages.slice(index + 1)];
  };
  snapshot = <T>(thing: T): T => structuredClone(thing);
}

export class NodeChat extends AbstractChat<UIMessage> {
  /** `reconnect`: the URL resumeStream() asks, made when it is asked (as an app's prepareReconnectToStreamRequest would). */
  constructor(api: string, headers?: Record<string, string>, reconnect?: () => string) {
    const prepareReconnectToStreamRequest = reconnect === undefined ? undefined : () => ({ api: reconnect() });
    super({ transport: new DefaultChatTransport({ api, headers: headers ?? {}, ...(prepareReconnectToStreamRequest === undefined ? {} : { prepareReconnectToStreamRequest }) }), state: new PlainState() });
  }
}
