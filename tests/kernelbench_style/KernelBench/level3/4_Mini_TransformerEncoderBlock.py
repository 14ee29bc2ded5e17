import torch
import torch.nn as nn
import torch.nn.functional as F


class FeedForward(nn.Module):
    """A position-wise feed-forward block with dropout (active: the model is left training)."""

    def __init__(self, embed_dim, hidden_dim, dropout):
        super(FeedForward, self).__init__()
        self.net = nn.Sequential(
            nn.Linear(embed_dim, hidden_dim),
            nn.GELU(),
            nn.Dropout(dropout),
            nn.Linear(hidden_dim, embed_dim),
        )

    def forward(self, x):
        return self.net(x)


class Model(nn.Module):
    def __init__(self, embed_dim, num_heads, hidden_dim, dropout=0.1):
        """
        Pre-norm transformer encoder block.

        :param embed_dim: Embedding dimension
        :param num_heads: Number of attention heads
        :param hidden_dim: Hidden size of the feed-forward block
        :param dropout: Dropout probability
        """
        super(Model, self).__init__()
        self.norm1 = nn.LayerNorm(embed_dim)
        self.attn = nn.MultiheadAttention(embed_dim, num_heads, dropout=dropout, batch_first=True)
        self.norm2 = nn.LayerNorm(embed_dim)
        self.ff = FeedForward(embed_dim, hidden_dim, dropout)

    def forward(self, x):
        """
        :param x: Input tensor of shape (batch_size, seq_len, embed_dim)
        :return: Output tensor of the same shape
        """
        h = self.norm1(x)
        attn_out, _ = self.attn(h, h, h, need_weights=False)
        x = x + attn_out
        x = x + self.ff(self.norm2(x))
        return F.layer_norm(x, (x.shape[-1],))


batch_size = 2
seq_len = 16
embed_dim = 32
num_heads = 4
hidden_dim = 64


def get_inputs():
    return [torch.randn(batch_size, seq_len, embed_dim)]


def get_init_inputs():
    return [embed_dim, num_heads, hidden_dim]
