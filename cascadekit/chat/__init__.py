"""Chat format of the unified thinking model: ChatML with per-turn /think and /no_think."""

from cascadekit.chat.format import (
    EMPTY_THINK, MARKUP_TOKENS, NO_THINK, THINK, AssistantTurn, chat_template,
    install_chat_template, parse_assistant, render, strip_flag, thinking_mode, with_flag,
)

__all__ = [
    "EMPTY_THINK", "MARKUP_TOKENS", "NO_THINK", "THINK", "AssistantTurn", "chat_template",
    "install_chat_template", "parse_assistant", "render", "strip_flag", "thinking_mode", "with_flag",
]
