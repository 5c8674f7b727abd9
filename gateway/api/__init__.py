"""The client-facing dialects (A1, A2): chat completions, the Responses API and the Messages API.

Each dialect turns its request into the internal chat request, and the finished chat completion
(or the loop's stream of chat chunks) back into its own response shape. The route, the plugin
chain and the tool loop never know which dialect the client spoke.
"""
