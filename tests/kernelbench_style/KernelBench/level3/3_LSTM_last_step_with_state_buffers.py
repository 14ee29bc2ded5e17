import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, input_size, hidden_size, num_layers, output_size, dropout=0.0):
        """
        Initialize the LSTM model; its initial states are registered buffers.

        :param input_size: The number of expected features in the input `x`
        :param hidden_size: The number of features in the hidden state `h`
        :param num_layers: Number of recurrent layers
        :param output_size: The number of output features
        :param dropout: If non-zero, a Dropout layer on the outputs of each LSTM layer but the last
        """
        super(Model, self).__init__()
        self.register_buffer("h0", torch.randn((num_layers, batch_size, hidden_size)))
        self.register_buffer("c0", torch.randn((num_layers, batch_size, hidden_size)))
        self.lstm = nn.LSTM(
            input_size,
            hidden_size,
            num_layers,
            batch_first=True,
            dropout=dropout,
            bidirectional=False,
        )
        self.fc = nn.Linear(hidden_size, output_size)

    def forward(self, x):
        """
        Forward pass through the LSTM model.

        :param x: The input tensor, shape (batch_size, sequence_length, input_size)
        :return: A tuple: the output, shape (batch_size, output_size), and the last hidden state
        """
        out, state = self.lstm(x, (self.h0, self.c0))  # out: (batch_size, seq_length, hidden_size)
        out = self.fc(out[:, -1, :])  # out: (batch_size, output_size)
        return out, state[0]


# Test code
batch_size = 4
sequence_length = 16
input_size = 32
hidden_size = 32
num_layers = 2
output_size = 8
dropout = 0.0


def get_inputs():
    return [torch.randn(batch_size, sequence_length, input_size)]


def get_init_inputs():
    return [input_size, hidden_size, num_layers, output_size, dropout]
