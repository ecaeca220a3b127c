"""Neural-network weight compression: the T/AI 115.1-2021 chapter-10 bitstream."""
