import torch
import torch.nn as nn


class SqueezeExcite(nn.Module):
    def __init__(self, channels, reduction):
        super(SqueezeExcite, self).__init__()
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Sequential(
            nn.Conv2d(channels, channels // reduction, kernel_size=1),
            nn.ReLU(inplace=True),
            nn.Conv2d(channels // reduction, channels, kernel_size=1),
            nn.Sigmoid(),
        )

    def forward(self, x):
        return x * self.fc(self.pool(x))


class Model(nn.Module):
    def __init__(self):
        """
        A small convolutional network whose stages end in squeeze-and-excitation blocks.
        """
        super(Model, self).__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 16, kernel_size=3, padding=1),
            nn.ReLU(inplace=True),
            SqueezeExcite(16, 4),
            nn.MaxPool2d(kernel_size=2, stride=2),
            nn.Conv2d(16, 32, kernel_size=3, padding=1),
            nn.ReLU(inplace=True),
            SqueezeExcite(32, 4),
            nn.AdaptiveAvgPool2d((1, 1)),
        )
        self.classifier = nn.Linear(32, num_classes)

    def forward(self, x):
        """
        :param x: Input tensor, shape (batch_size, 3, height, width)
        :return: Output tensor, shape (batch_size, num_classes)
        """
        x = self.features(x)
        x = torch.flatten(x, 1)
        return self.classifier(x)


# Test code
batch_size = 2
num_classes = 10
height = 16
width = 16


def get_inputs():
    return [torch.randn(batch_size, 3, height, width)]


def get_init_inputs():
    return []
